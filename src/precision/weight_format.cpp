// The weight formats (unstuck/precision/weight_format.h): one class per rounding rule, each with its
// CPU and CUDA kernels. Built into unstuck_torch (CUDA buffers and device-side counts use libtorch);
// the rounding itself is precision/'s kernels, so the bits are those of the CPU reference.
#include "unstuck/precision/weight_format.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <optional>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/precision/fp8.h"
#include "precision/update_stats.h"
#if defined(UNSTUCK_HAVE_CUDA)
#include "unstuck/precision/cuda_kernels.h"
#endif

namespace unstuck::precision {
namespace {

// Our kernels run on the current device: make it the format's. The legacy default stream is
// libtorch's current stream unless a caller set another.
std::optional<c10::Device> device_of(Place place) {
  if (!place.cuda) return std::nullopt;
  return c10::Device(c10::kCUDA, c10::DeviceIndex(place.device));
}

c10::TensorOptions options_of(Place place) {
  return place.cuda ? c10::TensorOptions().device(c10::kCUDA, c10::DeviceIndex(place.device)) : c10::TensorOptions();
}

// fp32, fp16 and bf16, to nearest or stochastic: the fused kernel writes the rounded weights.
class Rounded : public WeightFormat {
 public:
  Rounded(const PrecisionConfig& precision, uint64_t seed, Place place) : WeightFormat(precision, seed, place) {}
};

// The grid-scaled analog: BF16 patterns with precision.analog_mantissa_bits mantissa bits. The fused
// step writes BF16, then the slice is rounded onto the coarser grid from the new master. CPU only.
class AnalogGrid : public WeightFormat {
 public:
  AnalogGrid(const PrecisionConfig& precision, uint64_t seed, Place place)
      : WeightFormat(precision, seed, place), bits_(precision.analog_mantissa_bits) {}
  void materialize(const float* master, uint64_t begin, std::size_t n, void* compute, uint64_t step,
                   const Fp8Channels*) const override {
    materialize_coarse_bf16(master, static_cast<uint16_t*>(compute), n, bits_, is_stochastic(storage_), key(step),
                            begin, threads());
  }
  void update(const AdamWBuffers& slice, std::size_t n, const std::vector<Segment>& segments, const AdamWHyper& hyper,
              uint64_t step) const override {
    fused_adamw(slice, segments, hyper, storage_, step);
    materialize(slice.master, slice.base, n, slice.compute, step, nullptr);
  }

 private:
  int bits_;
};

// FP8 E4M3 with one power-of-two scale per channel (row of a linear layer's matrix), held as BF16
// patterns; the other elements to BF16. A channel's scale is its largest element's, so the step
// updates every slice first (its BF16 output discarded), then takes the scales, then rounds.
class Fp8 : public WeightFormat {
 public:
  Fp8(const PrecisionConfig& precision, uint64_t seed, Place place, std::vector<Fp8Matrix> matrices)
      : WeightFormat(precision, seed, place), stochastic_(precision.mode == PrecisionMode::fp8_sr) {
    scales_.matrices = std::move(matrices);
    scales_.exponent.assign(fp8_channel_count(scales_.matrices), 0);
  }
  bool deferred() const override { return true; }
  const Fp8Channels* scales() const override { return &scales_; }

  void materialize(const float* master, uint64_t begin, std::size_t n, void* compute, uint64_t step,
                   const Fp8Channels* scales) const override {
    const Fp8Channels& s = scales ? *scales : scales_;
    if (!place_.cuda)
      return materialize_fp8(master, static_cast<uint16_t*>(compute), n, begin, s.matrices, s.exponent.data(),
                             stochastic_, key(step), threads());
#if defined(UNSTUCK_HAVE_CUDA)
    const c10::OptionalDeviceGuard guard(device_of(place_));
    // Another master's exponents are copied per call; this format's once per rescale().
    const at::Tensor other = scales ? device_exponents(s) : at::Tensor();
    materialize_fp8_cuda(master, static_cast<uint16_t*>(compute), n, begin, s.matrices,
                         (scales ? other : device_exponent_).data_ptr<int32_t>(), stochastic_, key(step), nullptr);
#endif
  }
  void update(const AdamWBuffers& slice, std::size_t, const std::vector<Segment>& segments, const AdamWHyper& hyper,
              uint64_t step) const override {
    fused_adamw(slice, segments, hyper, RoundMode::bf16_rn, step);
  }
  void rescale(const float* master, uint64_t begin, std::size_t n, const Combine& combine) override {
    const at::Tensor amax = at::zeros({int64_t(scales_.exponent.size())}, options_of(place_).dtype(at::kFloat));
    if (place_.cuda) {
#if defined(UNSTUCK_HAVE_CUDA)
      const c10::OptionalDeviceGuard guard(device_of(place_));
      fp8_channel_amax_cuda(master, n, begin, scales_.matrices, amax.data_ptr<float>(), nullptr);
#endif
    } else {
      fp8_channel_amax(master, n, begin, scales_.matrices, amax.data_ptr<float>(), threads());
    }
    if (combine && amax.numel() > 0) combine(amax.data_ptr<float>(), std::size_t(amax.numel()));
    const at::Tensor host = amax.cpu().contiguous();
    set_fp8_exponents(host.data_ptr<float>(), std::size_t(host.numel()), scales_.exponent);
    refresh_device_exponents();
  }
  void rescale(const std::function<void(int64_t, int64_t, float*)>& read, int64_t total) override {
    scales_ = fp8_channels(std::move(scales_.matrices), total, read, threads_);
    refresh_device_exponents();
  }

 private:
  // The exponents as an int32 tensor in this place (one copy of a few hundred KB at a real shape).
  at::Tensor device_exponents(const Fp8Channels& s) const {
    const at::Tensor host = at::from_blob(const_cast<int32_t*>(s.exponent.data()), {int64_t(s.exponent.size())},
                                          at::TensorOptions().dtype(at::kInt));
    return host.to(options_of(place_).device());
  }
  void refresh_device_exponents() {
    if (place_.cuda) device_exponent_ = device_exponents(scales_);
  }

  bool stochastic_;
  Fp8Channels scales_;
  at::Tensor device_exponent_;  // on a GPU: scales_.exponent there
};

}  // namespace

void set_fp8_exponents(const float* amax, std::size_t n, std::vector<int32_t>& exponent) {
  exponent.resize(n);
  for (std::size_t i = 0; i < n; ++i) exponent[i] = fp8_scale_exponent(amax[i]);
}

Fp8Channels fp8_channels(std::vector<Fp8Matrix> matrices, int64_t total,
                         const std::function<void(int64_t, int64_t, float*)>& read, int threads) {
  constexpr int64_t kSlice = 1 << 22;
  Fp8Channels c;
  c.matrices = std::move(matrices);
  std::vector<float> amax(fp8_channel_count(c.matrices), 0.0f);
  const int64_t slice = std::min(kSlice, std::max<int64_t>(total, 1));
  std::vector<float> host(static_cast<std::size_t>(slice));
  for (int64_t b = 0; b < total; b += slice) {
    const int64_t n = std::min(slice, total - b);
    read(b, n, host.data());
    fp8_channel_amax(host.data(), std::size_t(n), uint64_t(b), c.matrices, amax.data(), {threads});
  }
  set_fp8_exponents(amax.data(), amax.size(), c.exponent);
  return c;
}

std::unique_ptr<WeightFormat> WeightFormat::make(const PrecisionConfig& precision, uint64_t rounding_seed, Place place,
                                                 std::vector<Fp8Matrix> fp8_matrices) {
  if (is_fp8(precision.mode)) return std::make_unique<Fp8>(precision, rounding_seed, place, std::move(fp8_matrices));
  const RoundMode mode = round_mode_for(precision.mode);
  if (precision.analog_mantissa_bits > 0 && (mode == RoundMode::bf16_rn || mode == RoundMode::bf16_sr)) {
    if (place.cuda)
      throw UserError(
          "precision.analog_mantissa_bits (the grid-scaled analog) runs on the CPU only, and the weights "
          "are on cuda:" +
          std::to_string(place.device) + ": set run.device: cpu");
    return std::make_unique<AnalogGrid>(precision, rounding_seed, place);
  }
  return std::make_unique<Rounded>(precision, rounding_seed, place);
}

WeightFormat::WeightFormat(const PrecisionConfig& precision, uint64_t rounding_seed, Place place)
    : storage_(round_mode_for(precision.mode)), place_(place), seed_(rounding_seed), threads_(precision.threads) {
#if !defined(UNSTUCK_HAVE_CUDA)
  if (place.cuda)
    throw UserError(
        "the weights are on a CUDA device but this build has no CUDA kernels "
        "(configure with UNSTUCK_CUDA=ON)");
#endif
}

WeightFormat::~WeightFormat() = default;

void WeightFormat::materialize(const float* master, uint64_t begin, std::size_t n, void* compute, uint64_t step,
                               const Fp8Channels*) const {
  if (!place_.cuda) return precision::materialize(master, compute, n, storage_, key(step), begin, threads());
#if defined(UNSTUCK_HAVE_CUDA)
  const c10::OptionalDeviceGuard guard(device_of(place_));
  materialize_cuda(master, compute, n, storage_, key(step), begin, nullptr);
#endif
}

void WeightFormat::update(const AdamWBuffers& slice, std::size_t, const std::vector<Segment>& segments,
                          const AdamWHyper& hyper, uint64_t step) const {
  fused_adamw(slice, segments, hyper, storage_, step);
}

void WeightFormat::fused_adamw(const AdamWBuffers& slice, const std::vector<Segment>& segments, const AdamWHyper& hyper,
                               RoundMode mode, uint64_t step) const {
  if (!place_.cuda) {
    fused_adamw_step(slice, segments, hyper, mode, key(step), threads());
    return;
  }
#if defined(UNSTUCK_HAVE_CUDA)
  const c10::OptionalDeviceGuard guard(device_of(place_));
  fused_adamw_cuda(slice, segments, hyper, mode, key(step), nullptr);
#endif
}

void count_slice_changes(RoundMode storage, Place place, const SliceTensors& slice, const void* before,
                         const void* after, std::size_t block, std::vector<int64_t>& changed, double* delta,
                         double* weight, const KernelOptions& options) {
  const std::size_t bytes = compute_element_bytes(storage);
  if (!place.cuda) {
    const char* old_bits = static_cast<const char*>(before);
    const char* new_bits = static_cast<const char*>(after);
    for (std::size_t k = 0; k < slice.segments.size(); ++k) {
      const std::size_t at = std::size_t(slice.segments[k].offset - slice.begin) * bytes;
      changed[slice.tensor[k]] +=
          int64_t(count_changed_bits(old_bits + at, new_bits + at, slice.segments[k].size, storage));
    }
    add_block_update_sums(before, after, slice.n, storage, block, delta, weight, options);
    return;
  }
  // The same comparisons as tensor operations on the device, one copy of the results to the host.
  const c10::OptionalDeviceGuard guard(device_of(place));
  const at::ScalarType value = storage == RoundMode::fp32                                       ? at::kFloat
                               : storage == RoundMode::fp16_rn || storage == RoundMode::fp16_sr ? at::kHalf
                                                                                                : at::kBFloat16;
  const int64_t n = int64_t(slice.n), b = int64_t(block);
  const auto view = [&](const void* p) {
    return at::from_blob(const_cast<void*>(p), {n}, options_of(place).dtype(value));
  };
  const at::Tensor old_v = view(before), new_v = view(after);
  const at::ScalarType bits = bytes == 4 ? at::kInt : at::kShort;
  const at::Tensor differ = old_v.view(bits).ne(new_v.view(bits));  // (n) bool
  std::vector<at::Tensor> counts;
  for (const Segment& seg : slice.segments)
    counts.push_back(differ.narrow(0, int64_t(seg.offset - slice.begin), int64_t(seg.size)).sum());
  const int64_t nb = (n + b - 1) / b;
  const auto sumsq_per_block = [&](const at::Tensor& x) {  // (n) -> (nb): squares summed in double
    const at::Tensor x2 = x.to(at::kDouble).square();
    return at::constant_pad_nd(x2, {0, nb * b - n}).view({nb, b}).sum(1);
  };
  const at::Tensor old_f = old_v.to(at::kFloat);
  const at::Tensor sums = at::cat({at::stack(counts).to(at::kDouble), sumsq_per_block(new_v.to(at::kFloat) - old_f),
                                   sumsq_per_block(old_f)})
                              .cpu();
  const double* h = sums.data_ptr<double>();
  const std::size_t segments = slice.segments.size();
  for (std::size_t k = 0; k < segments; ++k) changed[slice.tensor[k]] += int64_t(h[k]);
  for (int64_t i = 0; i < nb; ++i) {
    delta[i] += h[segments + std::size_t(i)];
    weight[i] += h[segments + std::size_t(nb + i)];
  }
}

Fp8Channels fp8_channels(std::vector<Fp8Matrix> matrices, const float* master, std::size_t n, int threads) {
  Fp8Channels c;
  c.matrices = std::move(matrices);
  std::vector<float> amax(fp8_channel_count(c.matrices), 0.0f);
  fp8_channel_amax(master, n, 0, c.matrices, amax.data(), {threads});
  set_fp8_exponents(amax.data(), amax.size(), c.exponent);
  return c;
}

void round_to_fp8_grid(float* x, uint64_t begin, std::size_t n, const Fp8Channels& channels, int threads) {
  constexpr std::size_t kSlice = std::size_t(1) << 22;
  std::vector<uint16_t> bits(std::min(kSlice, std::max<std::size_t>(n, 1)));
  for (std::size_t b = 0; b < n; b += kSlice) {
    const std::size_t m = std::min(kSlice, n - b);
    materialize_fp8(x + b, bits.data(), m, begin + b, channels.matrices, channels.exponent.data(), false, {},
                    {threads});
    for (std::size_t i = 0; i < m; ++i) x[b + i] = bf16_to_float(bits[i]);
  }
}

}  // namespace unstuck::precision
