// CUDA launchers of the precision kernels (materialize, fused AdamW, non-finite count): same
// contract and bits as the CPU entry points in rounding.h and fused_adamw.h. Pointers are device
// pointers, `stream` a cudaStream_t (nullptr: default stream). Defined when UNSTUCK_HAVE_CUDA;
// CUDA errors throw std::runtime_error naming the launcher.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "unstuck/precision/fused_adamw.h"
#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision {

// Device version of materialize(): rounds master[0, n) into compute[0, n). `global_offset` is the
// index of master[0] in the unsharded flat buffer (it keys the SR bits). Asynchronous on `stream`.
void materialize_cuda(const float* master, void* compute, std::size_t n, RoundMode mode, SrKey key,
                      uint64_t global_offset = 0, void* stream = nullptr);

// Device version of fused_adamw_step() with the per-step scalars already computed. The changed
// counts are reduced on the device and copied back, so this call waits for `stream`.
// Throws std::invalid_argument when a segment starts below buffers.base.
AdamWStepStats fused_adamw_cuda(const AdamWBuffers& buffers, const std::vector<Segment>& segments,
                                const AdamWScalars& scalars, RoundMode mode, SrKey key, void* stream = nullptr);

// Same, from the step's hyper-parameters (scalars as the CPU path computes them).
inline AdamWStepStats fused_adamw_cuda(const AdamWBuffers& buffers, const std::vector<Segment>& segments,
                                       const AdamWHyper& hyper, RoundMode mode, SrKey key, void* stream = nullptr) {
  return fused_adamw_cuda(buffers, segments, adamw_scalars(hyper), mode, key, stream);
}

// Device versions of fp8_channel_amax() and materialize_fp8() (rounding.h), same bits: `amax` (one
// non-negative float per channel, combined by max) and `exponent` are device pointers, `matrices` the
// host table. Asynchronous on `stream`.
void fp8_channel_amax_cuda(const float* master, std::size_t n, uint64_t global_offset,
                           const std::vector<Fp8Matrix>& matrices, float* amax, void* stream = nullptr);
void materialize_fp8_cuda(const float* master, uint16_t* compute, std::size_t n, uint64_t global_offset,
                          const std::vector<Fp8Matrix>& matrices, const int32_t* exponent, bool stochastic, SrKey key,
                          void* stream = nullptr);

// Number of elements of x[0, n) that are NaN or +-Inf. Waits for `stream`.
std::size_t count_nonfinite_cuda(const float* x, std::size_t n, void* stream = nullptr);

// out[b] = sum of x[b * block_len + i]^2 over i < block_len, in double, for b < blocks (device
// pointers; x holds blocks * block_len elements). The order of the additions is fixed by block_len
// alone, so a block's sum does not depend on the launch, the stream or the rest of the buffer.
// Asynchronous on `stream`.
void block_sumsq_cuda(const float* x, std::size_t blocks, std::size_t block_len, double* out, void* stream = nullptr);

}  // namespace unstuck::precision
