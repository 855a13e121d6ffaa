// CUDA twins of the fused per-layer CPU kernels (model/layer_kernels.h): the residual add + RMSNorm
// (one block per row; the sum of squares in the CPU's 16 lanes, each in element order, folded as
// the CPU folds them) and SiLU x up (one thread per element), from the same per-element math and
// compiled with --fmad=false, so their bits are the CPU kernels'.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/layer_kernels.h"

namespace unstuck::model {
namespace {

using lanes::kLanes;
constexpr int kNormThreads = 256;

template <class E>
__global__ void add_rms_norm_kernel(const typename E::T* x, const typename E::T* __restrict__ y,
                                    const typename E::T* __restrict__ weight, typename E::T* sum,
                                    typename E::T* __restrict__ out, long long dim, float eps) {
  __shared__ float lane[kLanes];
  __shared__ float inv;
  const long long o = (long long)blockIdx.x * dim;
  if (threadIdx.x < kLanes) {  // lane j: the squares of elements j, j + 16, ... in order (dot() on the CPU)
    float acc = 0.0f;
    for (long long d = threadIdx.x; d < dim; d += kLanes) {
      const float s = E::round(E::load(x + o + d) + E::load(y + o + d));
      acc += s * s;
    }
    lane[threadIdx.x] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = lane[j];
    const float mean = lanes::fold(acc) / float(dim);
    inv = 1.0f / sqrtf(mean + eps);
  }
  __syncthreads();
  for (long long d = threadIdx.x; d < dim; d += blockDim.x) {
    const float s = E::round(E::load(x + o + d) + E::load(y + o + d));
    E::store(out + o + d, normed<E>(s, inv, E::load(weight + d)));
    E::store(sum + o + d, s);  // sum may be x: each thread reads and writes only its own elements here
  }
}

template <class E>
__global__ void silu_mul_kernel(const typename E::T* __restrict__ gate_up, typename E::T* __restrict__ out,
                                long long rows, long long F) {
  const long long n = rows * F, stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const long long r = i / F, f = i % F;
    const typename E::T* g = gate_up + r * 2 * F;
    E::store(out + i, silu_times<E>(E::load(g + f), E::load(g + F + f)));
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class E>
void launch_add_rms_norm(const typename E::T* x, const typename E::T* y, const typename E::T* weight,
                         typename E::T* sum, typename E::T* out, int64_t rows, int64_t dim, float eps, void* stream) {
  if (rows == 0) return;
  add_rms_norm_kernel<E>
      <<<unsigned(rows), kNormThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, weight, sum, out, dim, eps);
  check_launch("add_rms_norm_cuda");
}

template <class E>
void launch_silu_mul(const typename E::T* gate_up, typename E::T* out, int64_t rows, int64_t F, void* stream) {
  const int64_t n = rows * F;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  silu_mul_kernel<E><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate_up, out, rows, F);
  check_launch("silu_mul_cuda");
}

}  // namespace

void add_rms_norm_f32_cuda(const float* x, const float* y, const float* weight, float* sum, float* out, int64_t rows,
                           int64_t dim, float eps, void* stream) {
  launch_add_rms_norm<lanes::F32>(x, y, weight, sum, out, rows, dim, eps, stream);
}

void add_rms_norm_bf16_cuda(const uint16_t* x, const uint16_t* y, const uint16_t* weight, uint16_t* sum, uint16_t* out,
                            int64_t rows, int64_t dim, float eps, void* stream) {
  launch_add_rms_norm<lanes::BF16>(x, y, weight, sum, out, rows, dim, eps, stream);
}

void silu_mul_f32_cuda(const float* gate_up, float* out, int64_t rows, int64_t F, void* stream) {
  launch_silu_mul<lanes::F32>(gate_up, out, rows, F, stream);
}

void silu_mul_bf16_cuda(const uint16_t* gate_up, uint16_t* out, int64_t rows, int64_t F, void* stream) {
  launch_silu_mul<lanes::BF16>(gate_up, out, rows, F, stream);
}

}  // namespace unstuck::model
