// Private: the fused sampler's CPU kernel, one read of each row's logits (max and sum of exponentials
// in one pass over cache-sized chunks, then the draw inside the chunk where the uniform lands), and
// the scalar reference its tests compare with. Torch-free; src/rollout/sampler.cpp runs it on the
// logits of a CPU decode step, and it is the twin a device sampler is checked against.
#pragma once

#include <cstdint>

#include "precision/lane_math.h"

namespace unstuck::rollout {

// The per-token math the CPU kernel and its device twin share.
// The scaled logit s = x / temperature (x itself when greedy or at temperature 1).
UNSTUCK_LANE_FN float scaled_logit(float x, float temperature) {
  return temperature == 0.0f || temperature == 1.0f ? x : x / temperature;
}
// exp(d) for d = s - (a maximum) <= 0, 0 below e^-87: such a token is never drawn.
// (The exp is taken first and then selected, not branched over, so a loop of it vectorizes.)
UNSTUCK_LANE_FN float sample_weight(float d) {
  const float e = lanes::exp_nonpositive(d);
  return d < -87.0f ? 0.0f : e;
}
constexpr int64_t kSampleChunk = 2048;  // tokens per chunk: 8 KiB of logits, scaled, maxed and summed in L1

struct SampleRowsShape {
  int64_t vocab = 0;       // V logits per row
  int64_t row_stride = 0;  // elements between rows' logits (>= V)
  float temperature = 1;   // s = logits / temperature (a float division); 0: greedy on s = logits
  int64_t top_k = 0;       // draw among the tokens with s >= the k-th largest s; 0 or >= V: all
  double top_p = 1;        // then drop a token when the mass before it (descending s, ties by index) reaches top_p
};

// For rows r in [first, last):
//   logprobs[r] = s[token] - log(sum_i exp(s_i))          (temperature applied, before top-k / top-p)
//   greedy:  token = the first index of the largest s;
//   else:    token = the first kept index i whose cumulative weight sum_{j <= i, kept} exp(s_j - max s)
//            exceeds uniforms[r] * (the kept tokens' total): the inverse CDF of the filtered
//            distribution. A token whose weight is below e^-87 (1.6e-38 of the top token's) is never drawn.
// Sums run in fixed 16-lane order within 2048-token chunks, the chunks combine in double; exp and log
// are Cephes' polynomials of plain float operations (src/precision/lane_math.h), so every ISA clone, and
// a device twin, computes the same bits. The log-prob is within 4e-6 + 2 ulp of the double
// reference's, and the token is the reference's except where the uniform falls within a relative
// 1e-5 of a boundary of the CDF.
// A row holding NaN or +inf (or only -inf) gets a NaN log-prob and the first index of its largest
// logit, NaN counting as largest. uniforms may be null when greedy.
void sample_rows_f32(const float* logits, const float* uniforms, const SampleRowsShape& shape, int64_t* tokens,
                     float* logprobs, int64_t first, int64_t last);

// The same on a CUDA device for rows [0, rows) on `stream` (device pointers; uniforms null when
// greedy), with the CPU kernel's bits: one block per row, the chunks' lanes summed in the CPU's
// order, the draw walked in the same order. Greedy and temperature sampling (top_k 0, top_p 1: the
// filters run as libtorch's ops on a device); throws std::invalid_argument otherwise and
// std::runtime_error when the launch fails. Defined in CUDA builds only (sample_cuda.cu).
void sample_rows_cuda(const float* logits, const float* uniforms, const SampleRowsShape& shape, int64_t rows,
                      int64_t* tokens, float* logprobs, void* stream);

// The scalar reference: the same definition with std::exp and sequential double sums.
void sample_rows_reference(const float* logits, const float* uniforms, const SampleRowsShape& shape, int64_t* tokens,
                           float* logprobs, int64_t rows);

}  // namespace unstuck::rollout
