// CUDA kernel behind block_sumsq_cuda(): the sum of squares (in double) of each block of a flat
// FP32 buffer, one CUDA block per buffer block, reduced in a fixed order (thread-strided partial
// sums, then a shared-memory tree), so the result is the same on every run and launch.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_groups.cuh"
#include "unstuck/precision/cuda_kernels.h"

namespace unstuck::precision {
namespace cuda {

__global__ void block_sumsq_kernel(const float* __restrict__ x, uint64_t block_len, double* __restrict__ out) {
  __shared__ double partial[kThreads];
  const float* b = x + uint64_t(blockIdx.x) * block_len;
  double s = 0;
  for (uint64_t i = threadIdx.x; i < block_len; i += kThreads) {
    const double v = double(b[i]);
    s += v * v;
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

}  // namespace cuda

void block_sumsq_cuda(const float* x, std::size_t blocks, std::size_t block_len, double* out, void* stream) {
  if (blocks == 0) return;
  if (blocks > 0x7FFFFFFFu) throw std::invalid_argument("block_sumsq_cuda: too many blocks");
  cuda::block_sumsq_kernel<<<unsigned(blocks), cuda::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, block_len,
                                                                                                       out);
  cuda::check_cuda(cudaGetLastError(), "block_sumsq_cuda");
}

}  // namespace unstuck::precision
