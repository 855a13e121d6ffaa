// Rounding a whole master outside the optimizer step (unstuck/train/weight_rounding.h).
#include "unstuck/train/weight_rounding.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::train {
namespace {

// Whole masters are rounded this many elements at a time (no full-size temporary).
constexpr int64_t kSliceElems = 1 << 22;

}  // namespace

torch::ScalarType compute_dtype(precision::RoundMode mode) {
  switch (mode) {
    case precision::RoundMode::fp32:
      return torch::kFloat32;
    case precision::RoundMode::bf16_rn:
    case precision::RoundMode::bf16_sr:
      return torch::kBFloat16;
    case precision::RoundMode::fp16_rn:
    case precision::RoundMode::fp16_sr:
      return torch::kHalf;
  }
  return torch::kFloat32;
}

torch::ScalarType forward_dtype(const precision::PrecisionConfig& precision, bool cuda) {
  const torch::ScalarType compute = compute_dtype(precision::round_mode_for(precision.mode));
  const bool fp32 = precision.compute == precision::ComputeMode::fp32 || (compute == torch::kHalf && !cuda);
  return fp32 ? torch::kFloat32 : compute;
}

torch::Tensor round_base_to_grid(const torch::Tensor& master, int analog_mantissa_bits) {
  if (analog_mantissa_bits == 0) return master.to(torch::kBFloat16).to(torch::kFloat32);
  const torch::Tensor host = master.to(torch::kCPU, torch::kFloat32).contiguous();
  torch::Tensor bits = torch::empty({host.numel()}, host.options().dtype(torch::kBFloat16));
  precision::materialize_coarse_bf16(host.data_ptr<float>(), static_cast<uint16_t*>(bits.data_ptr()),
                                     std::size_t(host.numel()), analog_mantissa_bits, false, {});
  return bits.to(torch::kFloat32).view(master.sizes()).to(master.device());
}

void round_base_to_grid(float* x, int64_t n, int analog_mantissa_bits) {
  torch::Tensor bits = torch::empty({std::min(n, kSliceElems)}, torch::kBFloat16);
  for (int64_t i = 0; i < n; i += kSliceElems) {
    const int64_t len = std::min(kSliceElems, n - i);
    const torch::Tensor slice = torch::from_blob(x + i, {len}, torch::kFloat32);
    if (analog_mantissa_bits == 0) {
      bits.narrow(0, 0, len).copy_(slice);
    } else {
      precision::materialize_coarse_bf16(x + i, static_cast<uint16_t*>(bits.data_ptr()), std::size_t(len),
                                         analog_mantissa_bits, false, {});
    }
    slice.copy_(bits.narrow(0, 0, len));
  }
}

void round_base_to_grid_(torch::Tensor& master, int analog_mantissa_bits) {
  if (master.scalar_type() != torch::kFloat32 || !master.is_contiguous())
    throw std::invalid_argument("round_base_to_grid_: expected a contiguous FP32 tensor");
  if (master.is_cpu()) return round_base_to_grid(master.data_ptr<float>(), master.numel(), analog_mantissa_bits);
  torch::Tensor flat = master.view({-1});
  for (int64_t i = 0; i < flat.numel(); i += kSliceElems) {
    torch::Tensor slice = flat.narrow(0, i, std::min(kSliceElems, flat.numel() - i));
    slice.copy_(round_base_to_grid(slice, analog_mantissa_bits));
  }
}

std::string cpu_only_precision(const precision::PrecisionConfig& precision) {
  if (precision.analog_mantissa_bits > 0)
    return "precision.analog_mantissa_bits (the grid-scaled analog) runs on the CPU only";
  return "";
}

void round_base_to_fp8_(torch::Tensor& master, const model::ParamLayout& layout, int threads) {
  if (!master.is_cpu() || master.scalar_type() != torch::kFloat32 || !master.is_contiguous())
    throw UserError("grpo.round_base_to_fp8: the base must be a contiguous FP32 buffer in host memory");
  float* x = master.data_ptr<float>();
  const auto n = std::size_t(master.numel());
  precision::round_to_fp8_grid(x, 0, n, precision::fp8_channels(layout.fp8_matrices(), x, n, threads), threads);
}

torch::Tensor frozen_base_weights(torch::Tensor base, const precision::PrecisionConfig& precision,
                                  torch::ScalarType forward) {
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = compute_dtype(precision::round_mode_for(precision.mode));
  if (dtype == torch::kBFloat16 && precision.analog_mantissa_bits > 0)
    round_base_to_grid_(base, precision.analog_mantissa_bits);
  torch::Tensor rounded = dtype == base.scalar_type() ? std::move(base) : base.to(dtype);  // to nearest
  base = torch::Tensor();  // the FP32 base is released before a widened copy is made
  return rounded.scalar_type() == forward ? rounded : rounded.to(forward);
}

void materialize_compute_slice(const precision::PrecisionConfig& precision, uint64_t rounding_seed, const float* master,
                               int64_t begin, int64_t n, void* out, int64_t step, const Fp8Channels* scales) {
  const auto format = precision::WeightFormat::make(precision, rounding_seed, {},
                                                    scales ? scales->matrices : std::vector<precision::Fp8Matrix>{});
  if (format->deferred() && !scales)  // its scales come from the whole master: the caller's
    throw std::invalid_argument("materialize_compute_slice: a format with scales needs the master's");
  format->materialize(master, uint64_t(begin), std::size_t(n), out, uint64_t(step), scales);
}

}  // namespace unstuck::train
