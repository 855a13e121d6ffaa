// CUDA kernels of the FP8 compute weights (precision.mode fp8_rn / fp8_sr): the channel maxima and the
// rounding, bit for bit the CPU entry points fp8_channel_amax and materialize_fp8 of rounding.h (the
// element rule is fp8.h's, UNSTUCK_HD). One block per row piece of one FP8 matrix: the row's exponent
// and powers are read once per row, and a row's maximum combines with the table's by one atomic max.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_groups.cuh"
#include "unstuck/precision/cuda_kernels.h"
#include "unstuck/precision/fp8.h"

namespace unstuck::precision {
namespace cuda {
namespace {

// The rows of matrix m that [lo, hi) meets: rows [first, first + count) of m, in global indices
// [max(lo, m.offset + first * cols), ...). count 0 when they do not meet.
struct RowSpan {
  uint64_t begin = 0, end = 0;  // global element range of the matrix inside [lo, hi)
  uint64_t first = 0, count = 0;
};

RowSpan rows_met(const Fp8Matrix& m, uint64_t lo, uint64_t hi) {
  RowSpan s;
  s.begin = std::max(lo, m.offset);
  s.end = std::min(hi, m.offset + m.rows * m.cols);
  if (s.begin >= s.end || m.cols == 0) return s;
  s.first = (s.begin - m.offset) / m.cols;
  s.count = (s.end - 1 - m.offset) / m.cols - s.first + 1;
  return s;
}

// Row first + r of the matrix: its elements inside [begin, end) and its channel.
struct RowPiece {
  uint64_t lo, hi, channel;
};

__device__ __forceinline__ RowPiece row_piece(const Fp8Matrix& m, const RowSpan& s, uint64_t r) {
  const uint64_t row = s.first + r;
  const uint64_t lo = m.offset + row * m.cols;
  return {lo > s.begin ? lo : s.begin, lo + m.cols < s.end ? lo + m.cols : s.end, m.first_row + row};
}

__global__ void amax_kernel(const float* __restrict__ master, uint64_t global_offset, Fp8Matrix m, RowSpan s,
                            unsigned int* __restrict__ amax_bits) {
  __shared__ unsigned int warp_best[kThreads / 32];
  for (uint64_t r = blockIdx.x; r < s.count; r += gridDim.x) {  // one row per block at a time
    const RowPiece p = row_piece(m, s, r);
    unsigned int best = 0;  // |x| bits: non-negative floats order as their bit patterns
    for (uint64_t i = p.lo + threadIdx.x; i < p.hi; i += blockDim.x) {
      const unsigned int b = float_bits(master[i - global_offset]) & 0x7FFFFFFFu;
      if (b < 0x7F800000u && b > best) best = b;  // finite only
    }
    for (int d = 16; d > 0; d >>= 1) best = max(best, __shfl_down_sync(0xFFFFFFFFu, best, d));
    if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (unsigned w = 1; w < blockDim.x / 32; ++w) best = max(best, warp_best[w]);
      atomicMax(amax_bits + p.channel, best);
    }
    __syncthreads();  // warp_best is reused by the next row
  }
}

__global__ void round_kernel(const float* __restrict__ master, uint16_t* __restrict__ compute, uint64_t global_offset,
                             Fp8Matrix m, RowSpan s, const int32_t* __restrict__ exponent, bool stochastic, SrKey key) {
  for (uint64_t r = blockIdx.x; r < s.count; r += gridDim.x) {
    const RowPiece p = row_piece(m, s, r);
    const int e = exponent[p.channel];
    const double down = fp8_pow2(-e), up = fp8_pow2(e);
    const bool fast = fp8_fast_exponent(e);
    for (uint64_t i = p.lo + threadIdx.x; i < p.hi; i += blockDim.x) {
      const uint32_t r32 = stochastic ? sr_bits_fp16(key.seed, key.step, i) : 0u;
      const float x = master[i - global_offset];
      compute[i - global_offset] = fast ? fp8_e4m3_scaled_fast(x, float(down), float(up), stochastic, r32)
                                        : fp8_e4m3_scaled_by(x, down, up, stochastic, r32);
    }
  }
}

}  // namespace
}  // namespace cuda

void fp8_channel_amax_cuda(const float* master, std::size_t n, uint64_t global_offset,
                           const std::vector<Fp8Matrix>& matrices, float* amax, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  for (const Fp8Matrix& m : matrices) {
    const cuda::RowSpan s = cuda::rows_met(m, global_offset, global_offset + n);
    if (s.count == 0) continue;
    cuda::amax_kernel<<<cuda::grid_blocks(s.count, "fp8_channel_amax_cuda"), cuda::kThreads, 0, st>>>(
        master, global_offset, m, s, reinterpret_cast<unsigned int*>(amax));
    cuda::check_cuda(cudaGetLastError(), "fp8_channel_amax_cuda");
  }
}

void materialize_fp8_cuda(const float* master, uint16_t* compute, std::size_t n, uint64_t global_offset,
                          const std::vector<Fp8Matrix>& matrices, const int32_t* exponent, bool stochastic, SrKey key,
                          void* stream) {
  if (n == 0) return;
  // Everything as BF16 first (the BF16 modes' kernel), then the FP8 channels over it, as on the CPU.
  materialize_cuda(master, compute, n, stochastic ? RoundMode::bf16_sr : RoundMode::bf16_rn, key, global_offset,
                   stream);
  const auto st = static_cast<cudaStream_t>(stream);
  for (const Fp8Matrix& m : matrices) {
    const cuda::RowSpan s = cuda::rows_met(m, global_offset, global_offset + n);
    if (s.count == 0) continue;
    cuda::round_kernel<<<cuda::grid_blocks(s.count, "materialize_fp8_cuda"), cuda::kThreads, 0, st>>>(
        master, compute, global_offset, m, s, exponent, stochastic, key);
    cuda::check_cuda(cudaGetLastError(), "materialize_fp8_cuda");
  }
}

}  // namespace unstuck::precision
