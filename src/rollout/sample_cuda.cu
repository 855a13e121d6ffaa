// The CUDA twin of the fused sampler (rollout/sample_kernel.h): one block per row, each operation in
// the CPU kernel's order (a chunk's 16 lanes each summed in token order and folded as the CPU folds
// them, the chunks combined and the draw walked in double by one thread), the per-token math shared
// through lane_math.h and compiled with --fmad=false, so tokens and log-probs equal the CPU's bit for
// bit. The chunks are scanned 16 at a time (16 lanes each); the draw's chunk is staged in shared memory.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "rollout/sample_kernel.h"

namespace unstuck::rollout {
namespace {

constexpr int kThreads = 256;
constexpr int kLanes = lanes::kLanes;
constexpr int kChunksAtOnce = kThreads / kLanes;
constexpr int kChunk = int(kSampleChunk);

struct Row {        // shared by the block: thread 0 writes, every thread reads after a barrier
  float max;        // the row's largest scaled logit M
  double target;    // uniform * the kept total
  double acc;       // the walk's cumulative weight before chunk `chunk`
  int chunk;        // the chunk the walk or the argmax reads next (-1: done)
  long long last;   // the walk's last token passed (-1: none)
  long long token;  // the result (-1: not yet)
  int first;        // first index of M within the argmax's chunk
};

__device__ int chunk_size(int c, long long V) {
  const long long left = V - (long long)c * kChunk;
  return int(left < kChunk ? left : kChunk);
}

// This thread's lane value into the block's lanes; the chunk's lane 0 folds its 16 into *out (fold:
// lanes::fold or lanes::fold_max, the CPU's order). A barrier on each side.
template <class Fold>
__device__ void fold_chunk_lanes(float* lane, float value, bool active, float* out, Fold fold) {
  lane[threadIdx.x] = value;
  __syncthreads();
  if (active && threadIdx.x % kLanes == 0) {
    float acc[kLanes];
    for (int k = 0; k < kLanes; ++k) acc[k] = lane[threadIdx.x + k];
    *out = fold(acc);
  }
  __syncthreads();
}

// Each chunk's max and sum of exp(s - max), as scan_chunk on the CPU: lane j of a chunk covers its
// tokens j, j + 16, ... in order; one thread folds the 16 lanes in the CPU's order.
__device__ void scan_chunks(const float* x, long long V, float T, int chunks, float* cmax, float* csum, float* lane) {
  const int j = threadIdx.x % kLanes;
  for (int c0 = 0; c0 < chunks; c0 += kChunksAtOnce) {
    const int c = c0 + threadIdx.x / kLanes;
    const bool active = c < chunks;
    const int n = active ? chunk_size(c, V) : 0;
    const float* xc = x + (long long)c * kChunk;
    float m = lanes::kNegInf;
    for (int i = j; i < n; i += kLanes) {
      const float s = scaled_logit(xc[i], T);
      m = s > m ? s : m;
    }
    fold_chunk_lanes(lane, m, active, &cmax[c], lanes::fold_max);
    float sum = 0.0f;
    if (active) {
      const float cm = cmax[c];
      for (int i = j; i < n; i += kLanes) {
        const float s = scaled_logit(xc[i], T);
        if (cm == lanes::kNegInf)
          sum = s != s ? s : sum;  // a chunk of -inf sums to 0, or NaN when it holds a NaN
        else
          sum += sample_weight(s - cm);
      }
    }
    fold_chunk_lanes(lane, sum, active, &csum[c], lanes::fold);
  }
}

// The first index of the row's maximum (RowSampler::first_max): thread 0 names the first chunk whose
// max it is, the block finds the first token equal to it there.
__device__ long long first_max(const float* x, long long V, float T, int chunks, const float* cmax, Row& row) {
  if (threadIdx.x == 0) {
    row.chunk = 0;
    while (cmax[row.chunk] != row.max) ++row.chunk;
    row.first = kChunk;
  }
  __syncthreads();
  const float* xc = x + (long long)row.chunk * kChunk;
  const int n = chunk_size(row.chunk, V);
  for (int i = threadIdx.x; i < n; i += kThreads)
    if (scaled_logit(xc[i], T) == row.max) atomicMin(&row.first, i);
  __syncthreads();
  return (long long)row.chunk * kChunk + row.first;
}

// The draw (RowSampler::draw): thread 0 finds the chunk from the chunks' weights, the block stages
// that chunk's token weights in shared memory, thread 0 walks them in order in double; a walk left
// short by rounding goes on into the next chunk.
__device__ void draw(const float* x, long long V, float T, int chunks, const float* cmax, const float* csum, float* w,
                     Row& row) {
  if (threadIdx.x == 0) {
    double acc = 0;
    int c = 0;
    for (; c < chunks; ++c) {
      const double wc = csum[c] * double(sample_weight(cmax[c] - row.max));
      if (wc > 0 && acc + wc > row.target) break;
      acc += wc;
    }
    row.acc = acc;
    row.chunk = c < chunks ? c : -1;
    row.last = -1;
    row.token = -1;
  }
  __syncthreads();
  while (row.chunk >= 0) {
    const int c = row.chunk, n = chunk_size(c, V);
    const float cm = cmax[c];
    const double f = sample_weight(cm - row.max);
    const float* xc = x + (long long)c * kChunk;
    for (int i = threadIdx.x; i < n; i += kThreads) {  // 0: not drawable (below e^-87 of M)
      const float s = scaled_logit(xc[i], T);
      w[i] = s - row.max < -87.0f ? 0.0f : sample_weight(s - cm);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int i = 0; f != 0 && i < n && row.token < 0; ++i) {
        if (w[i] == 0.0f) continue;
        row.last = (long long)c * kChunk + i;
        row.acc += double(w[i]) * f;
        if (row.acc > row.target) row.token = row.last;
      }
      row.chunk = row.token < 0 && c + 1 < chunks ? c + 1 : -1;
    }
    __syncthreads();
  }
}

__global__ void sample_rows_kernel(const float* __restrict__ logits, const float* __restrict__ uniforms,
                                   SampleRowsShape p, long long* tokens, float* logprobs) {
  extern __shared__ float chunk_sh[];  // (2, chunks): each chunk's max, then its sum
  __shared__ float lane[kThreads];
  __shared__ float w[kChunk];
  __shared__ Row row;
  __shared__ bool degenerate;
  __shared__ double lse;
  const long long V = p.vocab;
  const int chunks = int((V + kChunk - 1) / kChunk);
  const float* x = logits + (long long)blockIdx.x * p.row_stride;
  const float T = p.temperature;
  float* cmax = chunk_sh;
  float* csum = chunk_sh + chunks;
  scan_chunks(x, V, T, chunks, cmax, csum, lane);
  if (threadIdx.x == 0) {
    float M = lanes::kNegInf;
    for (int c = 0; c < chunks; ++c) M = M < cmax[c] ? cmax[c] : M;  // std::max(M, c.max)
    double total = 0;
    for (int c = 0; c < chunks; ++c) total += csum[c] * double(sample_weight(cmax[c] - M));
    row.max = M;
    degenerate = !(total > 0) || isinf(M) || isnan(M) || isinf(total) || isnan(total);
    lse = double(M) + double(lanes::log_positive(float(total)));
    row.target = T == 0.0f ? 0.0 : double(uniforms[blockIdx.x]) * total;  // no filters: the kept total
  }
  __syncthreads();
  if (degenerate) {  // as degenerate_row: the first NaN, else the first largest logit; NaN log-prob
    if (threadIdx.x == 0) {
      long long best = 0;
      for (long long i = 0; i < V; ++i) {
        if (x[i] != x[i]) {
          best = i;
          break;
        }
        if (x[i] > x[best]) best = i;
      }
      tokens[blockIdx.x] = best;
      logprobs[blockIdx.x] = __int_as_float(0x7FC00000);
    }
    return;
  }
  long long token;
  if (T == 0.0f) {
    token = first_max(x, V, T, chunks, cmax, row);
  } else {
    draw(x, V, T, chunks, cmax, csum, w, row);
    token = row.last >= 0 ? row.last : first_max(x, V, T, chunks, cmax, row);
  }
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = token;
    logprobs[blockIdx.x] = float(double(scaled_logit(x[token], T)) - lse);
  }
}

}  // namespace

void sample_rows_cuda(const float* logits, const float* uniforms, const SampleRowsShape& shape, int64_t rows,
                      int64_t* tokens, float* logprobs, void* stream) {
  if ((shape.top_k > 0 && shape.top_k < shape.vocab) || shape.top_p < 1.0)
    throw std::invalid_argument("sample_rows_cuda: top-k and top-p run as libtorch's ops on a device");
  if (shape.temperature != 0.0f && uniforms == nullptr)
    throw std::invalid_argument("sample_rows_cuda: sampling needs uniforms");
  if (rows == 0) return;
  const int chunks = int((shape.vocab + kSampleChunk - 1) / kSampleChunk);
  const size_t shared = size_t(2 * chunks) * sizeof(float);
  static_assert(sizeof(long long) == sizeof(int64_t));
  sample_rows_kernel<<<unsigned(rows), kThreads, shared, static_cast<cudaStream_t>(stream)>>>(
      logits, uniforms, shape, reinterpret_cast<long long*>(tokens), logprobs);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("sample_rows_cuda: ") + cudaGetErrorString(e));
}

}  // namespace unstuck::rollout
