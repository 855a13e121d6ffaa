// CUDA kernels behind materialize_cuda() and count_nonfinite_cuda(). Each thread rounds one group
// of global indices (cuda_groups.cuh) with the round_math.h functions, so the bits equal the CPU
// reference for any launch shape, shard or unaligned start.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_groups.cuh"
#include "unstuck/precision/cuda_kernels.h"

namespace unstuck::precision {
namespace cuda {

// One thread's work: master[i - begin] -> compute[i - begin] for the indices of group g in
// [begin, end).
template <RoundMode M>
UNSTUCK_HD void materialize_group(const float* __restrict__ master, typename Layout<M>::Out* __restrict__ compute,
                                  uint64_t begin, uint64_t end, SrKey key, uint64_t g) {
  float x[Layout<M>::G];
  typename Layout<M>::Out y[Layout<M>::G];
  load_group<M>(master, begin, g, begin, end, x);
  round_group<M>(x, y, key, g);
  store_group<M>(compute, begin, g, begin, end, y);
}

template <RoundMode M>
__global__ void materialize_kernel(const float* __restrict__ master, typename Layout<M>::Out* __restrict__ compute,
                                   uint64_t begin, uint64_t end, SrKey key) {
  const uint64_t g0 = first_group<M>(begin), groups = end_group<M>(end) - g0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t t = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < groups; t += stride) {
    materialize_group<M>(master, compute, begin, end, key, g0 + t);
  }
}

// NaN / +-Inf count of x[0, n). Index i is x[i - begin], where `begin` (0..3) is x's position in
// its 16-byte line, so every full group of 4 is one aligned vector load.
__global__ void count_nonfinite_kernel(const float* __restrict__ x, uint64_t begin, uint64_t end,
                                       unsigned long long* __restrict__ total) {
  constexpr RoundMode M = RoundMode::fp32;
  const uint64_t groups = end_group<M>(end);
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  unsigned long long count = 0;
  for (uint64_t g = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    float v[Layout<M>::G];
    load_group<M>(x, begin, g, begin, end, v);  // out-of-range elements read as 0 (finite)
#pragma unroll
    for (int k = 0; k < Layout<M>::G; ++k) {
      count += (float_bits(v[k]) & 0x7F800000u) == 0x7F800000u ? 1 : 0;
    }
  }
  count = warp_sum(count);
  if ((threadIdx.x & 31) == 0 && count != 0) atomicAdd(total, count);
}

}  // namespace cuda

void materialize_cuda(const float* master, void* compute, std::size_t n, RoundMode mode, SrKey key,
                      uint64_t global_offset, void* stream) {
  if (n == 0) return;
  cuda::dispatch_mode(mode, [&](auto tag) {
    constexpr RoundMode M = decltype(tag)::value;
    using Out = typename cuda::Layout<M>::Out;
    const uint64_t begin = global_offset, end = global_offset + n;
    const uint64_t groups = cuda::end_group<M>(end) - cuda::first_group<M>(begin);
    const unsigned blocks = cuda::grid_blocks((groups + cuda::kThreads - 1) / cuda::kThreads, "materialize_cuda");
    cuda::materialize_kernel<M><<<blocks, cuda::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        master, static_cast<Out*>(compute), begin, end, key);
    cuda::check_cuda(cudaGetLastError(), "materialize_cuda");
  });
}

std::size_t count_nonfinite_cuda(const float* x, std::size_t n, void* stream) {
  if (n == 0) return 0;
  constexpr const char* kName = "count_nonfinite_cuda";
  const auto s = static_cast<cudaStream_t>(stream);
  const uint64_t begin = (reinterpret_cast<uintptr_t>(x) / sizeof(float)) % 4;
  const unsigned blocks = cuda::grid_blocks((n / 4 + cuda::kThreads) / cuda::kThreads, kName);
  unsigned long long* total = nullptr;
  cuda::check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&total), sizeof *total, s), kName);
  unsigned long long result = 0;
  cudaError_t err = cudaMemsetAsync(total, 0, sizeof *total, s);
  if (err == cudaSuccess) {
    cuda::count_nonfinite_kernel<<<blocks, cuda::kThreads, 0, s>>>(x, begin, begin + n, total);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, s);
  }
  const cudaError_t free_err = cudaFreeAsync(total, s);  // always release, even after an error
  if (err == cudaSuccess) err = free_err;
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  cuda::check_cuda(err, kName);
  return std::size_t(result);
}

}  // namespace unstuck::precision
