// CUDA fill of lora.dropout's keep bits (model/lora_dropout.h): one thread per block of four
// features of one (row, position), the same Philox math as the CPU fill, so the masks are the
// CPU's bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/lora_dropout.h"

namespace unstuck::model {
namespace {

__global__ void dropout_keep_kernel(uint8_t* __restrict__ out, const int64_t* __restrict__ ids,
                                    const int64_t* __restrict__ position_ids, int64_t rows, int64_t positions,
                                    int64_t features, DropoutStream s, uint32_t threshold) {
  const int64_t quads = (features + 3) / 4, total = rows * positions * quads;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t rp = t / quads, f = (t % quads) * 4, row = rp / positions;
    const precision::Philox4x32 r = dropout_block(s, uint32_t(ids[row]), uint32_t(position_ids[rp]), uint32_t(f));
    uint8_t* o = out + rp * features + f;
    for (int64_t lane = 0; lane < 4 && f + lane < features; ++lane) o[lane] = (r.v[lane] >> 8) >= threshold;
  }
}

}  // namespace

void dropout_keep_cuda(uint8_t* out, const int64_t* ids, const int64_t* position_ids, int64_t rows, int64_t positions,
                       int64_t features, DropoutStream s, uint32_t threshold, void* stream) {
  const int64_t work = rows * positions * ((features + 3) / 4);
  if (work == 0) return;
  constexpr int kThreads = 256;
  const int blocks = int(std::min<int64_t>((work + kThreads - 1) / kThreads, 65535));
  dropout_keep_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(out, ids, position_ids, rows,
                                                                                  positions, features, s, threshold);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("dropout_keep_cuda: ") + cudaGetErrorString(e));
}

}  // namespace unstuck::model
