// Rounding a whole FP32 master outside the optimizer step: the frozen base of a LoRA run, the base
// put on a format's grid (grpo.round_base_to_bf16 / round_base_to_fp8), and a checkpoint's compute
// weights regenerated a slice at a time (export, resume). The step's own rounding is the weight
// format's (unstuck/precision/weight_format.h).
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>

#include "unstuck/model/param_layout.h"
#include "unstuck/precision/precision_config.h"
#include "unstuck/precision/weight_format.h"

namespace unstuck::train {

using precision::Fp8Channels;

// The setting of `precision` that runs on the CPU only, as errors name it ("precision.analog_mantissa_bits
// (the grid-scaled analog) runs on the CPU only"), or "" when it runs anywhere.
std::string cpu_only_precision(const precision::PrecisionConfig& precision);

// Dtype of the compute weights of a round mode (fp32, bf16 or fp16).
torch::ScalarType compute_dtype(precision::RoundMode mode);
// Dtype the forwards compute in: FP32 where precision.compute is fp32, and for FP16 weights off a
// GPU (no fast FP16 kernels on the CPU: DESIGN.md); else the compute weights' dtype.
torch::ScalarType forward_dtype(const precision::PrecisionConfig& precision, bool cuda);

// The frozen base a LoRA run computes with: `base` (FP32, moved in) rounded to nearest into the
// compute dtype of precision.mode (onto precision.analog_mantissa_bits' grid first in a BF16 mode;
// left as it is in fp32), then held in `forward` (widened to FP32 when the forward runs in FP32).
torch::Tensor frozen_base_weights(torch::Tensor base, const precision::PrecisionConfig& precision,
                                  torch::ScalarType forward);

// The compute-weight bits of master[0, n) (FP32, global elements [begin, begin + n)) at optimizer
// step `step`, as TrainableWeights materializes them (precision.mode, the rounding seed, the analog
// grid), into host memory `out` of compute_dtype (n elements). A checkpoint's compute weights are
// regenerated with it a slice at a time (export, resume).
// Formats with scales (FP8) need those of the master being rounded (`scales`); else it is unused.
void materialize_compute_slice(const precision::PrecisionConfig& precision, uint64_t rounding_seed, const float* master,
                               int64_t begin, int64_t n, void* out, int64_t step, const Fp8Channels* scales = nullptr);

// grpo.round_base_to_fp8: the FP32 base put on fp8_rn's grid in place (precision::round_to_fp8_grid
// with the channels' scales of this master), as FP32 values; CPU.
void round_base_to_fp8_(torch::Tensor& master, const model::ParamLayout& layout, int threads = 0);

// grpo.round_base_to_bf16: the FP32 base rounded to nearest BF16, or onto the grid of
// precision.analog_mantissa_bits when that is set (1-6), as FP32 again (on master's device).
torch::Tensor round_base_to_grid(const torch::Tensor& master, int analog_mantissa_bits);
// The same in place, a bounded slice at a time (no full-size temporary). `master`: contiguous FP32.
void round_base_to_grid_(torch::Tensor& master, int analog_mantissa_bits);
// round_base_to_grid_ of host FP32 values x[0, n).
void round_base_to_grid(float* x, int64_t n, int analog_mantissa_bits);

}  // namespace unstuck::train
