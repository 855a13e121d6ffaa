// Private: the fused per-layer kernels' shared per-element math (the CPU kernels in cpu_kernels.cpp
// and their CUDA twins in layer_kernels_cuda.cu compute the same bits from it) and the CUDA twins'
// launchers. The CPU kernels define the bits (cpu_kernels.h); a twin is checked against them on a
// GPU lease before any path uses it.
#pragma once

#include <cstdint>

#include "precision/lane_math.h"

namespace unstuck::model {

// SiLU(g) * u as libtorch's silu then product in the dtype E: silu rounded, the product rounded by
// the store.
template <class E>
UNSTUCK_LANE_FN float silu_times(float g, float u) {
  return E::round(g / (1.0f + lanes::exp_any(-g))) * u;
}

// One element of Hugging Face's RMSNorm after the row's inv = 1 / sqrt(mean(s^2) + eps): the
// normalized value rounded to the dtype, then the weight's product (rounded by the store).
template <class E>
UNSTUCK_LANE_FN float normed(float s, float inv, float weight) {
  return weight * E::round(s * inv);
}

// CUDA twins of add_rms_norm_{f32,bf16} and silu_mul_{f32,bf16} (cpu_kernels.h) for `rows` rows of
// device buffers on `stream`, with the CPU kernels' bits: one block per row for the norm, its 16
// lanes summed in the CPU's order; one thread per element for SiLU x up. std::runtime_error when a
// launch fails. Defined in CUDA builds only.
void add_rms_norm_f32_cuda(const float* x, const float* y, const float* weight, float* sum, float* out, int64_t rows,
                           int64_t dim, float eps, void* stream);
void add_rms_norm_bf16_cuda(const uint16_t* x, const uint16_t* y, const uint16_t* weight, uint16_t* sum, uint16_t* out,
                            int64_t rows, int64_t dim, float eps, void* stream);
void silu_mul_f32_cuda(const float* gate_up, float* out, int64_t rows, int64_t F, void* stream);
void silu_mul_bf16_cuda(const uint16_t* gate_up, uint16_t* out, int64_t rows, int64_t F, void* stream);

}  // namespace unstuck::model
