// The CUDA precision kernels against the scalar CPU reference (round_math.h called per element,
// here in the test) and the CPU entry points: materialize for every RoundMode, fused AdamW on a
// shard with unaligned segments, the FP8 channel maxima and rounding, the non-finite count, all bit
// for bit. Without a usable device
// the CUDA tests skip with the reason; the cuda_info test runs everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "unstuck/common/cuda_info.h"

TEST(CudaInfo, DeviceCountAnswersWithoutCrashingAndSaysWhyNot) {
  std::string why_not;
  const int count = unstuck::cuda_device_count(&why_not);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(why_not.empty()) << "cuda_device_count() == 0 must come with a reason";
  }
  EXPECT_EQ(unstuck::cuda_device_count(), count);  // no reason asked for: same answer
#if defined(UNSTUCK_HAVE_CUDA)
  EXPECT_TRUE(unstuck::cuda_compiled());
#else
  EXPECT_FALSE(unstuck::cuda_compiled());
  EXPECT_EQ(count, 0);
#endif
  EXPECT_FALSE(unstuck::nccl_version().empty());
}

#if defined(UNSTUCK_HAVE_CUDA)

#include <cuda_runtime.h>

#include "precision/precision_test_util.h"
#include "unstuck/precision/cuda_kernels.h"
#include "unstuck/precision/fp8.h"
#include "unstuck/precision/fused_adamw.h"
#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision {
namespace {

#define SKIP_WITHOUT_CUDA_DEVICE()                          \
  do {                                                      \
    std::string why_not;                                    \
    if (unstuck::cuda_device_count(&why_not) == 0) {        \
      GTEST_SKIP() << "no usable CUDA device: " << why_not; \
    }                                                       \
  } while (0)

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

using testing::reference_round;

std::string mode_name(RoundMode mode) { return round_mode_name(mode); }

// Test parameter; its PrintTo makes ctest and gtest show the mode's name.
struct ModeParam {
  RoundMode mode;
};
void PrintTo(const ModeParam& p, std::ostream* os) { *os << mode_name(p.mode); }

constexpr ModeParam kAllModes[] = {
    {RoundMode::fp32}, {RoundMode::bf16_rn}, {RoundMode::bf16_sr}, {RoundMode::fp16_rn}, {RoundMode::fp16_sr},
};

// Compute weights as bit patterns, stored with the mode's element size.
struct ComputeBits {
  std::size_t elem;
  std::vector<uint8_t> bytes;
  ComputeBits(RoundMode mode, std::size_t n, uint32_t fill) : elem(compute_element_bytes(mode)), bytes(n * elem) {
    for (std::size_t i = 0; i < n; ++i) set(i, fill);
  }
  uint32_t get(std::size_t i) const {
    if (elem == 4) {
      uint32_t b;
      std::memcpy(&b, &bytes[i * 4], 4);
      return b;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    return h;
  }
  void set(std::size_t i, uint32_t bits) {
    if (elem == 4) {
      std::memcpy(&bytes[i * 4], &bits, 4);
    } else {
      const uint16_t h = uint16_t(bits);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
};

// Same value for the FP32 state: identical bits, or both NaN. Arithmetic on a NaN gives the
// canonical NaN 0x7FFFFFFF on the GPU but keeps the input's payload on x86; the contract only
// promises NaN stays NaN (the rounded BF16 / FP16 weights are canonical NaN on both).
bool same_fp32(uint32_t a, uint32_t b) { return a == b || (std::isnan(bits_float(a)) && std::isnan(bits_float(b))); }

// Device memory with room for a misaligning shift in front; freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T = void>
  T* get(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
  }

 private:
  void* ptr_ = nullptr;
};

// Values at every edge the rounding contract names, for both BF16 and FP16.
std::vector<float> edge_values() {
  const uint32_t bits[] = {
      0x00000000u, 0x80000000u,               // +-0
      0x00000001u, 0x807FFFFFu, 0x00400000u,  // FP32 subnormals
      0x00800000u, 0x80800001u,               // smallest FP32 normals
      0x7FC00000u, 0xFFC00001u, 0x7FA00001u,  // NaNs: quiet, negative with payload, signalling
      0x7F800000u, 0xFF800000u,               // +-Inf
      0x7F7FFFFFu, 0xFF7FFFFFu,               // +-FLT_MAX (above the largest finite BF16)
      0x7F7F0000u, 0x7F7F0001u, 0x7F7F8000u,  // largest finite BF16, just above, halfway to Inf
      0x3F808000u, 0x3F818000u,               // BF16 ties (to even: down, up)
      0x3F800000u, 0xC0200000u, 0x3E200000u,  // exactly representable in both formats
      0x33800000u, 0x33000000u, 0xB3C00000u,  // FP16 subnormal grid: 2^-24, 2^-25 (tie), -1.5*2^-24
      0x387FFFFFu, 0x38800000u, 0x38800001u,  // around the smallest FP16 normal 2^-14
      0x32000000u, 0x00012345u,               // below half the smallest FP16 subnormal
  };
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(bits_float(b));
  for (float x : {65504.0f, -65504.0f, 65519.99f, 65520.0f, 65535.9f, 65536.0f, 1e6f, 65505.0f, 1.0f + 1.0f / 2048,
                  1.0f + 3.0f / 2048, 1e-5f, 6.0e-8f, -2.9e-8f}) {
    v.push_back(x);
  }
  return v;
}

// n test inputs: the edge values, then random bit patterns (every class of float) mixed with
// ordinary values over many binades.
std::vector<float> test_inputs(std::size_t n, uint32_t seed) {
  std::vector<float> x = edge_values();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-30, 20);
  while (x.size() < n) {
    if (rng() % 4 == 0) {
      x.push_back(bits_float(uint32_t(rng())));
    } else {
      x.push_back(std::ldexp(unit(rng), binade(rng)));
    }
  }
  x.resize(n);
  return x;
}

struct MaterializeCase {
  uint64_t global_offset;  // index of master[0] in the unsharded buffer
  std::size_t n;
  std::size_t shift;  // elements between the allocation's start and master[0] / compute[0]
};

class CudaMaterialize : public ::testing::TestWithParam<ModeParam> {};

TEST_P(CudaMaterialize, MatchesScalarReferenceBitForBit) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RoundMode mode = GetParam().mode;
  const SrKey key{0x0123456789ABCDEFull, 1234};
  const uint32_t kSentinel = 0xA5A5A5A5u;
  const MaterializeCase cases[] = {
      {0, 100003, 0},                     // aligned, odd length
      {12345, 77777, 3},                  // unaligned start in index and in memory
      {1, 5, 1},                          // shorter than one group
      {127, 130, 0},                      // straddles SR tiles
      {(uint64_t(1) << 40) + 5, 999, 2},  // 64-bit counters
      {7, 1, 0},
  };
  for (const MaterializeCase& c : cases) {
    SCOPED_TRACE("global_offset=" + std::to_string(c.global_offset) + " n=" + std::to_string(c.n) +
                 " shift=" + std::to_string(c.shift));
    const std::vector<float> master = test_inputs(c.n, uint32_t(c.n + c.shift));
    const std::size_t eb = compute_element_bytes(mode), pad = 8;
    DeviceBuffer d_master((c.n + c.shift) * 4), d_compute((c.n + c.shift + 2 * pad) * eb);
    ASSERT_NE(d_master.get(), nullptr);
    ASSERT_NE(d_compute.get(), nullptr);
    ComputeBits out(mode, c.n + c.shift + 2 * pad, kSentinel);
    ASSERT_CUDA(cudaMemcpy(d_master.get(c.shift * 4), master.data(), c.n * 4, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_compute.get(), out.bytes.data(), out.bytes.size(), cudaMemcpyHostToDevice));

    materialize_cuda(d_master.get<float>(c.shift * 4), d_compute.get((pad + c.shift) * eb), c.n, mode, key,
                     c.global_offset);
    ASSERT_CUDA(cudaDeviceSynchronize());
    ASSERT_CUDA(cudaMemcpy(out.bytes.data(), d_compute.get(), out.bytes.size(), cudaMemcpyDeviceToHost));

    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < c.n; ++i) {
      const uint32_t want = reference_round(master[i], mode, key, c.global_offset + i);
      const uint32_t got = out.get(pad + c.shift + i);
      if (got != want && mismatches++ < 5) {
        ADD_FAILURE() << mode_name(mode) << " element " << i << " (x bits 0x" << std::hex << float_bits(master[i])
                      << "): got 0x" << got << ", want 0x" << want;
      }
    }
    EXPECT_EQ(mismatches, 0u);
    for (std::size_t i = 0; i < pad + c.shift; ++i) {
      EXPECT_EQ(out.get(i), out.elem == 4 ? kSentinel : (kSentinel & 0xFFFFu)) << "wrote before";
    }
    for (std::size_t i = pad + c.shift + c.n; i < c.n + c.shift + 2 * pad; ++i) {
      EXPECT_EQ(out.get(i), out.elem == 4 ? kSentinel : (kSentinel & 0xFFFFu)) << "wrote after";
    }
  }
}

// Rounding a buffer in shards (any split, any offsets) gives the bits of rounding it whole.
TEST_P(CudaMaterialize, ShardsGiveTheBitsOfTheWholeBuffer) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RoundMode mode = GetParam().mode;
  const SrKey key{42, 7};
  const std::size_t n = 50021, eb = compute_element_bytes(mode);
  const std::vector<float> master = test_inputs(n, 99);
  DeviceBuffer d_master(n * 4), d_whole(n * eb), d_sharded(n * eb);
  ASSERT_CUDA(cudaMemcpy(d_master.get(), master.data(), n * 4, cudaMemcpyHostToDevice));
  materialize_cuda(d_master.get<float>(), d_whole.get(), n, mode, key, 0);
  const std::size_t cuts[] = {0, 1, 129, 4097, 33333, n};
  for (std::size_t s = 0; s + 1 < std::size(cuts); ++s) {
    materialize_cuda(d_master.get<float>(cuts[s] * 4), d_sharded.get(cuts[s] * eb), cuts[s + 1] - cuts[s], mode, key,
                     cuts[s]);
  }
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> whole(n * eb), sharded(n * eb);
  ASSERT_CUDA(cudaMemcpy(whole.data(), d_whole.get(), whole.size(), cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaMemcpy(sharded.data(), d_sharded.get(), sharded.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(whole == sharded);
}

// CPU and CUDA materialize the same bits.
TEST_P(CudaMaterialize, MatchesTheCpuMaterialize) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RoundMode mode = GetParam().mode;
  const SrKey key{5, 9};
  const std::size_t n = 30011;
  const uint64_t global_offset = 777;
  const std::vector<float> master = test_inputs(n, 17);
  ComputeBits cpu(mode, n, 0), gpu(mode, n, 0);
  materialize(master.data(), cpu.bytes.data(), n, mode, key, global_offset);
  DeviceBuffer d_master(n * 4), d_compute(gpu.bytes.size());
  ASSERT_CUDA(cudaMemcpy(d_master.get(), master.data(), n * 4, cudaMemcpyHostToDevice));
  materialize_cuda(d_master.get<float>(), d_compute.get(), n, mode, key, global_offset);
  ASSERT_CUDA(cudaMemcpy(gpu.bytes.data(), d_compute.get(), gpu.bytes.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(cpu.bytes == gpu.bytes);
}

// ---- fused AdamW
// ----------------------------------------------------------------------------------

// Host copy of the flat AdamW state of one shard (global indices [base, base + n)).
struct AdamWState {
  std::vector<float> master, grad, m, v;
  ComputeBits compute;
};

AdamWScalars scalars_for(double lr, double weight_decay, int64_t step, double grad_scale) {
  const double beta1 = 0.9, beta2 = 0.999;
  AdamWScalars s{};
  s.beta1 = float(beta1);
  s.one_minus_beta1 = float(1 - beta1);
  s.beta2 = float(beta2);
  s.one_minus_beta2 = float(1 - beta2);
  s.step_size = float(lr / (1 - std::pow(beta1, double(step))));
  s.sqrt_bc2 = float(std::sqrt(1 - std::pow(beta2, double(step))));
  s.eps = 1e-8f;
  s.decay_factor = float(1 - lr * weight_decay);
  s.grad_scale = float(grad_scale);
  return s;
}

// The scalar reference of fused_adamw_step: adamw_element then reference_round, per element.
std::vector<uint64_t> reference_adamw(AdamWState& st, uint64_t base, const std::vector<Segment>& segments,
                                      const AdamWScalars& s, RoundMode mode, SrKey key) {
  std::vector<uint64_t> changed(segments.size(), 0);
  for (std::size_t k = 0; k < segments.size(); ++k) {
    for (uint64_t i = segments[k].offset; i < segments[k].offset + segments[k].size; ++i) {
      const std::size_t j = std::size_t(i - base);
      adamw_element(st.master[j], st.m[j], st.v[j], st.grad[j], segments[k].decay, s);
      const uint32_t bits = reference_round(st.master[j], mode, key, i);
      changed[k] += bits != st.compute.get(j) ? 1 : 0;
      st.compute.set(j, bits);
    }
  }
  return changed;
}

// The changed counts agree, except that in FP32 mode a weight that was NaN and stays NaN may count
// either way: "changed" compares bits, and the GPU's arithmetic returns its canonical NaN where the
// CPU keeps the payload (the states below start with NaNs of many payloads; training never keeps a
// NaN weight: the non-finite check skips the step). `nan_kept`: such elements per segment.
std::vector<uint64_t> nan_kept_counts(const ComputeBits& before, const ComputeBits& after, uint64_t base,
                                      const std::vector<Segment>& segments, RoundMode mode) {
  std::vector<uint64_t> kept(segments.size(), 0);
  for (std::size_t k = 0; k < segments.size() && mode == RoundMode::fp32; ++k)
    for (uint64_t i = segments[k].offset; i < segments[k].offset + segments[k].size; ++i)
      kept[k] += std::isnan(bits_float(before.get(i - base))) && std::isnan(bits_float(after.get(i - base)));
  return kept;
}

void expect_changed_counts(const AdamWStepStats& got, const std::vector<uint64_t>& want,
                           const std::vector<uint64_t>& nan_kept, const std::string& what) {
  ASSERT_EQ(got.changed.size(), want.size());
  uint64_t slack = 0, total = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_LE(std::max(got.changed[k], want[k]) - std::min(got.changed[k], want[k]), nan_kept[k])
        << "segment " << k << " " << what << ": " << got.changed[k] << " changed vs " << want[k];
    slack += nan_kept[k];
    total += want[k];
  }
  EXPECT_LE(std::max(got.changed_total, total) - std::min(got.changed_total, total), slack) << what;
}

// n elements of AdamW state for global indices [base, base + n): the edge values and random bit
// patterns first, then mostly ordinary weights; gradients with NaN and Inf; compute weights as the
// previous step's rounding left them.
AdamWState make_adamw_state(RoundMode mode, uint64_t base, std::size_t n) {
  const bool fp16 = mode == RoundMode::fp16_rn || mode == RoundMode::fp16_sr;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AdamWState st{test_inputs(n, 3), {}, {}, {}, ComputeBits(mode, n, 0)};
  for (std::size_t j = 0; j < n; ++j) {
    if (j >= 200 && rng() % 10 != 0) st.master[j] = 0.05f * normal(rng);
    st.grad.push_back((fp16 ? 1024.0f : 1.0f) * 1e-3f * normal(rng));  // loss-scaled in FP16 modes
    st.m.push_back(1e-4f * normal(rng));
    st.v.push_back(1e-7f * std::fabs(normal(rng)));
  }
  for (std::size_t j : {5u, 1500u, 10000u}) st.grad[j] = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t j : {6u, 1501u, 10001u}) st.grad[j] = std::numeric_limits<float>::infinity();
  for (std::size_t j = 0; j < n; ++j) {
    st.compute.set(j, reference_round(st.master[j], mode, SrKey{11, 6}, base + j));
  }
  return st;
}

// The state on the device, each array `shift` elements past an aligned allocation.
struct DeviceAdamW {
  std::size_t n, shift, eb;
  DeviceBuffer master, grad, m, v, compute;
  AdamWBuffers buffers;
  DeviceAdamW(RoundMode mode, uint64_t base, std::size_t n_, std::size_t shift_)
      : n(n_),
        shift(shift_),
        eb(compute_element_bytes(mode)),
        master((n + shift) * 4),
        grad((n + shift) * 4),
        m((n + shift) * 4),
        v((n + shift) * 4),
        compute((n + shift) * eb) {
    buffers.master = master.get<float>(shift * 4);
    buffers.grad = grad.get<const float>(shift * 4);
    buffers.exp_avg = m.get<float>(shift * 4);
    buffers.exp_avg_sq = v.get<float>(shift * 4);
    buffers.compute = compute.get(shift * eb);
    buffers.base = base;
  }
  cudaError_t upload(const AdamWState& st) const {
    cudaError_t e = cudaMemcpy(master.get(shift * 4), st.master.data(), n * 4, cudaMemcpyHostToDevice);
    if (!e) e = cudaMemcpy(grad.get(shift * 4), st.grad.data(), n * 4, cudaMemcpyHostToDevice);
    if (!e) e = cudaMemcpy(m.get(shift * 4), st.m.data(), n * 4, cudaMemcpyHostToDevice);
    if (!e) e = cudaMemcpy(v.get(shift * 4), st.v.data(), n * 4, cudaMemcpyHostToDevice);
    if (!e) e = cudaMemcpy(compute.get(shift * eb), st.compute.bytes.data(), n * eb, cudaMemcpyHostToDevice);
    return e;
  }
  cudaError_t download(AdamWState& st) const {
    cudaError_t e = cudaMemcpy(st.master.data(), master.get(shift * 4), n * 4, cudaMemcpyDeviceToHost);
    if (!e) e = cudaMemcpy(st.m.data(), m.get(shift * 4), n * 4, cudaMemcpyDeviceToHost);
    if (!e) e = cudaMemcpy(st.v.data(), v.get(shift * 4), n * 4, cudaMemcpyDeviceToHost);
    if (!e) e = cudaMemcpy(st.compute.bytes.data(), compute.get(shift * eb), n * eb, cudaMemcpyDeviceToHost);
    return e;
  }
};

// Elements of `got` that differ from `want` (first few reported). Updated elements: equal, NaN
// payloads aside. Elements outside every segment: untouched, so exact bits.
std::size_t count_mismatches(const AdamWState& got, const AdamWState& want, uint64_t base,
                             const std::vector<Segment>& segments, RoundMode mode) {
  const std::size_t n = got.master.size();
  std::vector<bool> updated(n, false);
  for (const Segment& seg : segments) {
    for (uint64_t i = seg.offset; i < seg.offset + seg.size; ++i) updated[i - base] = true;
  }
  std::size_t mismatches = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const auto same = [&](uint32_t a, uint32_t b) { return updated[j] ? same_fp32(a, b) : a == b; };
    const bool ok = same(float_bits(got.master[j]), float_bits(want.master[j])) &&
                    same(float_bits(got.m[j]), float_bits(want.m[j])) &&
                    same(float_bits(got.v[j]), float_bits(want.v[j])) &&
                    (mode == RoundMode::fp32 ? same(got.compute.get(j), want.compute.get(j))
                                             : got.compute.get(j) == want.compute.get(j));
    if (!ok && mismatches++ < 5) {
      ADD_FAILURE() << "element " << j << " (global " << base + j << "): master 0x" << std::hex
                    << float_bits(got.master[j]) << " vs 0x" << float_bits(want.master[j]) << ", m 0x"
                    << float_bits(got.m[j]) << " vs 0x" << float_bits(want.m[j]) << ", v 0x" << float_bits(got.v[j])
                    << " vs 0x" << float_bits(want.v[j]) << ", compute 0x" << got.compute.get(j) << " vs 0x"
                    << want.compute.get(j);
    }
  }
  return mismatches;
}

class CudaFusedAdamW : public ::testing::TestWithParam<ModeParam> {};

TEST_P(CudaFusedAdamW, MatchesScalarReferenceOnAShard) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RoundMode mode = GetParam().mode;
  const bool fp16 = mode == RoundMode::fp16_rn || mode == RoundMode::fp16_sr;
  const uint64_t base = 1237;  // this shard starts at global index 1237
  const std::size_t n = 40000;
  // Unaligned offsets, decay on and off, an empty segment, gaps that must stay untouched.
  const std::vector<Segment> segments = {
      {base + 0, 1000, true},      {base + 1000, 0, true},          {base + 1000, 4099, false},
      {base + 5099, 1, true},      {base + 5103, 129, false},       {base + 6000, 20000, true},
      {base + 26003, 9000, false}, {base + 35003, n - 35003, true},
  };
  const AdamWState initial = make_adamw_state(mode, base, n);

  for (std::size_t shift : {0u, 1u}) {  // shift 1: no pointer is 16-byte aligned
    SCOPED_TRACE(mode_name(mode) + " pointer shift " + std::to_string(shift));
    AdamWState ref = initial;
    DeviceAdamW dev(mode, base, n, shift);
    ASSERT_CUDA(dev.upload(initial));
    // Two consecutive steps: the second sees compute weights the first one wrote.
    for (int64_t step : {7, 8}) {
      const AdamWScalars s = scalars_for(1e-3, 0.1, step, fp16 ? 1.0 / 1024 : 1.0);
      const SrKey key{11, uint64_t(step)};
      const ComputeBits before = ref.compute;
      const std::vector<uint64_t> want = reference_adamw(ref, base, segments, s, mode, key);
      const std::vector<uint64_t> nan_kept = nan_kept_counts(before, ref.compute, base, segments, mode);
      const AdamWStepStats got = fused_adamw_cuda(dev.buffers, segments, s, mode, key);
      expect_changed_counts(got, want, nan_kept, "step " + std::to_string(step));
      uint64_t elements = 0;
      for (const Segment& seg : segments) elements += seg.size;
      EXPECT_EQ(got.elements, elements);
    }
    AdamWState got = initial;
    ASSERT_CUDA(dev.download(got));
    EXPECT_EQ(count_mismatches(got, ref, base, segments, mode), 0u);
  }
}

// CPU and CUDA give the same step from the same hyper-parameters (the AdamWHyper overload).
TEST_P(CudaFusedAdamW, MatchesTheCpuFusedAdamWStep) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RoundMode mode = GetParam().mode;
  const uint64_t base = 300;
  const std::size_t n = 20000;
  const std::vector<Segment> segments = {{base + 3, 7000, true}, {base + 7003, 12990, false}};
  AdamWHyper hyper;
  hyper.lr = 1e-3;
  hyper.weight_decay = 0.1;
  hyper.step = 3;
  hyper.grad_scale = mode == RoundMode::fp16_rn || mode == RoundMode::fp16_sr ? 1.0 / 1024 : 1.0;
  const SrKey key{21, 3};
  const AdamWState initial = make_adamw_state(mode, base, n);

  AdamWState cpu = initial;
  const AdamWBuffers host{cpu.master.data(), cpu.grad.data(),          cpu.m.data(),
                          cpu.v.data(),      cpu.compute.bytes.data(), base};
  const AdamWStepStats want = fused_adamw_step(host, segments, hyper, mode, key);

  DeviceAdamW dev(mode, base, n, 0);
  ASSERT_CUDA(dev.upload(initial));
  const AdamWStepStats got = fused_adamw_cuda(dev.buffers, segments, hyper, mode, key);
  const std::vector<uint64_t> nan_kept = nan_kept_counts(initial.compute, cpu.compute, base, segments, mode);
  expect_changed_counts(got, want.changed, nan_kept, "one step");
  EXPECT_EQ(got.elements, want.elements);
  AdamWState result = initial;
  ASSERT_CUDA(dev.download(result));
  EXPECT_EQ(count_mismatches(result, cpu, base, segments, mode), 0u);
}

TEST_P(CudaFusedAdamW, RejectsBadInputsAndSkipsEmptySegments) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RoundMode mode = GetParam().mode;
  AdamWBuffers buffers;  // no segment touches memory, so null pointers are fine
  buffers.base = 100;
  const AdamWScalars s = scalars_for(1e-3, 0.0, 1, 1.0);
  EXPECT_THROW(fused_adamw_cuda(buffers, {{99, 4, true}}, s, mode, SrKey{}), std::invalid_argument);
  AdamWHyper bad;
  bad.eps = 0;
  EXPECT_THROW(fused_adamw_cuda(buffers, {{100, 4, true}}, bad, mode, SrKey{}), std::invalid_argument);
  const AdamWStepStats stats = fused_adamw_cuda(buffers, {{100, 0, true}, {500, 0, false}}, s, mode, SrKey{});
  EXPECT_EQ(stats.changed, (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(stats.changed_total, 0u);
  EXPECT_EQ(stats.elements, 0u);
}

std::string mode_param_name(const ::testing::TestParamInfo<ModeParam>& info) { return mode_name(info.param.mode); }

INSTANTIATE_TEST_SUITE_P(Modes, CudaMaterialize, ::testing::ValuesIn(kAllModes), mode_param_name);
INSTANTIATE_TEST_SUITE_P(Modes, CudaFusedAdamW, ::testing::ValuesIn(kAllModes), mode_param_name);

// ---- non-finite count
// -----------------------------------------------------------------------------

TEST(CudaCountNonfinite, CountsNanAndInfAtAnyAlignmentAndLength) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::size_t n_max = 100003;
  const std::vector<float> x = test_inputs(n_max, 5);  // edges plus random bit patterns
  DeviceBuffer d_x((n_max + 4) * 4);
  for (std::size_t shift : {0u, 1u, 2u, 3u}) {
    ASSERT_CUDA(cudaMemcpy(d_x.get(shift * 4), x.data(), n_max * 4, cudaMemcpyHostToDevice));
    for (std::size_t n :
         {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(5), std::size_t(11), std::size_t(4096), n_max}) {
      std::size_t want = 0;
      for (std::size_t i = 0; i < n; ++i) want += std::isfinite(x[i]) ? 0 : 1;
      EXPECT_EQ(count_nonfinite_cuda(d_x.get<const float>(shift * 4), n), want) << "n=" << n << " shift=" << shift;
    }
  }
}

// ---- FP8 compute weights
// ---------------------------------------------------------------------------

// fp8_channel_amax_cuda and materialize_fp8_cuda give the CPU entry points' bits: the channel maxima
// (NaN and Inf left out), then RN and SR rounding with the exponents from them, on the whole buffer
// and on two shards cut inside a row (a row's partial maxima combine by max). Three matrices with
// other tensors around them, row lengths that are no multiple of a warp, and rows with varied scales,
// some beyond FP32's normal range (the double path of the rule).
TEST(CudaFp8, ChannelMaximaAndRoundingMatchTheCpuBitForBit) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<Fp8Matrix> matrices{{128, 7, 33, 0}, {512, 300, 97, 7}, {30000, 3, 1000, 307}};
  const std::size_t n = 33500, rows = std::size_t(fp8_channel_count(matrices));
  std::vector<float> x = test_inputs(n, 71);
  for (std::size_t i = 128; i < n; ++i) x[i] = float(std::ldexp(double(x[i]), -int((i / 97) % 60)));
  x[140] = NAN;
  x[600] = INFINITY;
  std::vector<float> cpu_amax(rows, 0.0f);
  fp8_channel_amax(x.data(), n, 0, matrices, cpu_amax.data(), {1});
  DeviceBuffer d_x(n * 4), d_amax(rows * 4), d_exp(rows * 4), d_out(n * 2);
  ASSERT_CUDA(cudaMemcpy(d_x.get(), x.data(), n * 4, cudaMemcpyHostToDevice));
  const std::size_t cut = 512 + 97 * 150 + 40;  // inside row 150 of the second matrix
  for (const bool sharded : {false, true}) {
    ASSERT_CUDA(cudaMemset(d_amax.get(), 0, rows * 4));
    if (sharded) {
      fp8_channel_amax_cuda(d_x.get<const float>(), cut, 0, matrices, d_amax.get<float>());
      fp8_channel_amax_cuda(d_x.get<const float>() + cut, n - cut, cut, matrices, d_amax.get<float>());
    } else {
      fp8_channel_amax_cuda(d_x.get<const float>(), n, 0, matrices, d_amax.get<float>());
    }
    std::vector<float> gpu_amax(rows);
    ASSERT_CUDA(cudaMemcpy(gpu_amax.data(), d_amax.get(), rows * 4, cudaMemcpyDeviceToHost));
    for (std::size_t r = 0; r < rows; ++r)
      ASSERT_EQ(float_bits(gpu_amax[r]), float_bits(cpu_amax[r])) << "channel " << r << " sharded " << sharded;
  }
  std::vector<int32_t> exponent(rows);
  for (std::size_t r = 0; r < rows; ++r) exponent[r] = fp8_scale_exponent(cpu_amax[r]);
  exponent[0] = 140;  // beyond FP32's normal powers: the double path
  exponent[1] = -140;
  ASSERT_CUDA(cudaMemcpy(d_exp.get(), exponent.data(), rows * 4, cudaMemcpyHostToDevice));
  const SrKey key{0xFEEDull, 5};
  for (const bool sr : {false, true}) {
    std::vector<uint16_t> cpu(n), gpu(n);
    materialize_fp8(x.data(), cpu.data(), n, 0, matrices, exponent.data(), sr, key, {2});
    for (const bool sharded : {false, true}) {
      ASSERT_CUDA(cudaMemset(d_out.get(), 0xFF, n * 2));
      if (sharded) {
        materialize_fp8_cuda(d_x.get<const float>(), d_out.get<uint16_t>(), cut, 0, matrices,
                             d_exp.get<const int32_t>(), sr, key);
        materialize_fp8_cuda(d_x.get<const float>() + cut, d_out.get<uint16_t>() + cut, n - cut, cut, matrices,
                             d_exp.get<const int32_t>(), sr, key);
      } else {
        materialize_fp8_cuda(d_x.get<const float>(), d_out.get<uint16_t>(), n, 0, matrices, d_exp.get<const int32_t>(),
                             sr, key);
      }
      ASSERT_CUDA(cudaMemcpy(gpu.data(), d_out.get(), n * 2, cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(gpu[i], cpu[i]) << "element " << i << (sr ? " SR" : " RN") << " sharded " << sharded;
    }
  }
}

}  // namespace
}  // namespace unstuck::precision

#else  // !defined(UNSTUCK_HAVE_CUDA)

TEST(CudaKernels, NotCompiled) {
  GTEST_SKIP() << "built without CUDA kernels (configure with -DUNSTUCK_CUDA=ON on a machine with nvcc)";
}

#endif
