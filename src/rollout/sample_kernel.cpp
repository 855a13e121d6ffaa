// The fused sampler's CPU kernel and its scalar reference (src/rollout/sample_kernel.h). A row's
// logits are read once, chunk by chunk: each chunk is scaled into a buffer the size of L1, its maximum
// and its sum of exponentials taken there; the chunks' sums combine in double under the row's
// maximum, the uniform picks a chunk from them, and only that chunk is read again for the token.
#include "rollout/sample_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "precision/lane_math.h"

namespace unstuck::rollout {
namespace {

using lanes::fold;
using lanes::kLanes;
using lanes::kNegInf;
using lanes::max_of;

constexpr int64_t kChunk = kSampleChunk;
constexpr float kUnderflow = -87.0f;

UNSTUCK_INLINE float weight(float d) { return sample_weight(d); }

bool is_greedy(const SampleRowsShape& p) { return p.temperature == 0.0f; }
bool filters(const SampleRowsShape& p) {
  return !is_greedy(p) && ((p.top_k > 0 && p.top_k < p.vocab) || p.top_p < 1.0);
}

UNSTUCK_INLINE void scale_into(const float* x, int64_t n, float temperature, float* out) {
  if (temperature == 0.0f || temperature == 1.0f) {
    std::memcpy(out, x, std::size_t(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = scaled_logit(x[i], temperature);
}

// The kept tokens of a scaled row (keep[i] = 1): top-k by the k-th largest value (ties kept), then
// top-p over them in descending order, ties by index, with probabilities in double. The row must be
// free of NaN (the sorts need an order).
void keep_mask(const float* s, const SampleRowsShape& p, uint8_t* keep, std::vector<int32_t>& order) {
  const int64_t V = p.vocab;
  float kth = kNegInf;
  if (p.top_k > 0 && p.top_k < V) {
    std::vector<float> copy(s, s + V);
    std::nth_element(copy.begin(), copy.begin() + (p.top_k - 1), copy.end(), std::greater<float>());
    kth = copy[std::size_t(p.top_k - 1)];
  }
  order.clear();
  for (int64_t i = 0; i < V; ++i) {
    keep[i] = s[i] >= kth;
    if (keep[i]) order.push_back(int32_t(i));
  }
  if (p.top_p >= 1.0) return;
  std::stable_sort(order.begin(), order.end(), [s](int32_t a, int32_t b) { return s[a] > s[b]; });
  const double top = s[order[0]];
  double total = 0, before = 0;
  for (const int32_t i : order) total += std::exp(double(s[i]) - top);
  for (const int32_t i : order) {
    if (before >= p.top_p) keep[i] = 0;  // the mass before it already reaches top_p (the top token stays)
    before += std::exp(double(s[i]) - top) / total;
  }
}

// The result of a row whose logits hold NaN or +inf, or only -inf: no distribution to draw from.
void degenerate_row(const float* x, int64_t V, int64_t* token, float* logprob) {
  int64_t best = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (x[i] != x[i]) {
      best = i;
      break;
    }
    if (x[i] > x[best]) best = i;
  }
  *token = best;
  *logprob = std::numeric_limits<float>::quiet_NaN();
}

struct Chunk {
  float max = kNegInf;  // largest scaled logit of the chunk
  float all = 0;        // sum of exp(s - max) over the chunk
  float kept = 0;       // the same over its kept tokens
};

// The lane sums of exp(s - m) over a scaled chunk: all its tokens, and (Masked) the kept ones. Two
// instantiations so the unmasked one reads no mask and vectorizes as the lanes' 16 floats.
template <bool Masked>
UNSTUCK_INLINE void sum_lanes(const float* buf, int64_t n, float m, const uint8_t* keep, float (&all)[kLanes],
                              float (&kept)[kLanes]) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float w = weight(buf[i + j] - m);
      all[j] += w;
      if (Masked) kept[j] += keep[i + j] ? w : 0.0f;
    }
  for (int j = 0; i + j < n; ++j) {
    const float w = weight(buf[i + j] - m);
    all[j] += w;
    if (Masked) kept[j] += keep[i + j] ? w : 0.0f;
  }
}

// One chunk of n logits: scaled into buf (L1-sized), its maximum, and the sums of exp(s - max) over
// all its tokens and over the kept ones (keep: the chunk's mask, null when all are kept). A chunk of
// -inf sums to 0, or to NaN when it holds a NaN. Cloned per ISA; the lanes fix the order.
UNSTUCK_ISA_CLONES
Chunk scan_chunk(const float* x, int64_t n, float temperature, const uint8_t* keep, float* buf) {
  scale_into(x, n, temperature, buf);
  Chunk c{max_of(buf, n)};
  if (c.max == kNegInf) {
    for (int64_t i = 0; i < n; ++i)
      if (buf[i] != buf[i]) c.all = c.kept = std::numeric_limits<float>::quiet_NaN();
    return c;
  }
  float all[kLanes] = {}, kept[kLanes] = {};
  if (keep) {
    sum_lanes<true>(buf, n, c.max, keep, all, kept);
    c.kept = fold(kept);
  } else {
    sum_lanes<false>(buf, n, c.max, keep, all, kept);
  }
  c.all = fold(all);
  if (!keep) c.kept = c.all;
  return c;
}

class RowSampler {
 public:
  explicit RowSampler(const SampleRowsShape& p)
      : p_(p), chunks_(std::size_t((p.vocab + kChunk - 1) / kChunk)), keep_(filters(p) ? std::size_t(p.vocab) : 0) {}

  void sample(const float* x, float u, int64_t* token, float* logprob) {
    const int64_t V = p_.vocab;
    const uint8_t* keep = nullptr;
    const float* row = x;  // what the passes below read, scaled by temperature_ as they go
    temperature_ = p_.temperature;
    if (filters(p_)) {  // the mask needs the scaled row whole: the passes read it (T 1: the same floats)
      scaled_.resize(std::size_t(V));
      scale_into(x, V, p_.temperature, scaled_.data());
      if (!std::all_of(scaled_.begin(), scaled_.end(), [](float v) { return v == v; }))
        return degenerate_row(x, V, token, logprob);
      keep_mask(scaled_.data(), p_, keep_.data(), order_);
      keep = keep_.data();
      row = scaled_.data();
      temperature_ = 1.0f;
    }
    const Sums s = scan(row, keep);
    if (s.degenerate()) return degenerate_row(x, V, token, logprob);
    *token = is_greedy(p_) ? first_max(row, s.max) : draw(row, keep, s.max, double(u) * s.kept_total);
    *logprob = float(double(scaled_at(row, *token)) - s.lse());
  }

 private:
  struct Sums {
    float max = kNegInf;    // the row's largest scaled logit M
    double total = 0;       // sum of exp(s - M) over the row
    double kept_total = 0;  // the same over the kept tokens
    bool degenerate() const { return !(total > 0) || !std::isfinite(max) || !std::isfinite(total); }
    // log sum exp(s); total >= 1 (the max's own term), so its log is of a normal float
    double lse() const { return double(max) + double(lanes::log_positive(float(total))); }
  };

  // The one read of the row: each chunk's max and sums, then the row's.
  Sums scan(const float* x, const uint8_t* keep) {
    Sums s;
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const int64_t base = int64_t(c) * kChunk;
      chunks_[c] = scan_chunk(x + base, chunk_size(c), temperature_, keep ? keep + base : nullptr, buf_);
      s.max = std::max(s.max, chunks_[c].max);
    }
    for (Chunk& c : chunks_) {
      const double f = chunk_factor(c, s.max);
      s.total += c.all * f;
      s.kept_total += c.kept * f;
    }
    return s;
  }

  int64_t chunk_size(std::size_t c) const { return std::min<int64_t>(kChunk, p_.vocab - int64_t(c) * kChunk); }
  float scaled_at(const float* x, int64_t i) const {
    float s;
    scale_into(x + i, 1, temperature_, &s);
    return s;
  }
  // exp(chunk max - row max); a chunk whose max is below e^-87 of the row's holds nothing drawable
  // (and nothing the sums would notice). Float operations only (as the log below), so a device twin
  // gets the same bits.
  static double chunk_factor(const Chunk& c, float M) { return weight(c.max - M); }

  int64_t first_max(const float* x, float M) {
    for (std::size_t c = 0;; ++c) {
      if (chunks_[c].max != M) continue;
      const int64_t n = chunk_size(c);
      scale_into(x + int64_t(c) * kChunk, n, temperature_, buf_);
      for (int64_t i = 0; i < n; ++i)
        if (buf_[i] == M) return int64_t(c) * kChunk + i;
    }
  }

  // The first kept token whose cumulative weight exceeds target: the chunks' weights find the chunk,
  // its tokens are walked in double. Where rounding leaves the walk short of target (the chunk's float
  // sum above its tokens' double sum), the walk goes on, and ends at the last token it passed.
  int64_t draw(const float* x, const uint8_t* keep, float M, double target) {
    double acc = 0;
    std::size_t c = 0;
    for (; c < chunks_.size(); ++c) {
      const double w = chunks_[c].kept * chunk_factor(chunks_[c], M);
      if (w > 0 && acc + w > target) break;
      acc += w;
    }
    int64_t last = -1;
    for (; c < chunks_.size(); ++c) {
      const double f = chunk_factor(chunks_[c], M);
      if (f == 0) continue;
      const int64_t n = chunk_size(c), base = int64_t(c) * kChunk;
      scale_into(x + base, n, temperature_, buf_);
      for (int64_t i = 0; i < n; ++i) {
        if ((keep && !keep[base + i]) || buf_[i] - M < kUnderflow) continue;
        last = base + i;
        acc += double(weight(buf_[i] - chunks_[c].max)) * f;
        if (acc > target) return last;
      }
    }
    return last >= 0 ? last : first_max(x, M);
  }

  const SampleRowsShape& p_;
  float temperature_ = 1.0f;  // of the row the passes read: p_.temperature, or 1 for the scaled copy
  std::vector<Chunk> chunks_;
  std::vector<uint8_t> keep_;
  std::vector<float> scaled_;
  std::vector<int32_t> order_;
  alignas(64) float buf_[kChunk];
};

}  // namespace

void sample_rows_f32(const float* logits, const float* uniforms, const SampleRowsShape& shape, int64_t* tokens,
                     float* logprobs, int64_t first, int64_t last) {
  RowSampler sampler(shape);
  for (int64_t r = first; r < last; ++r)
    sampler.sample(logits + r * shape.row_stride, uniforms ? uniforms[r] : 0.0f, tokens + r, logprobs + r);
}

void sample_rows_reference(const float* logits, const float* uniforms, const SampleRowsShape& p, int64_t* tokens,
                           float* logprobs, int64_t rows) {
  const int64_t V = p.vocab;
  std::vector<float> s(std::size_t(V), 0.0f);
  std::vector<uint8_t> keep(std::size_t(V), 1);
  std::vector<int32_t> order;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * p.row_stride;
    scale_into(x, V, p.temperature, s.data());
    float M = kNegInf;
    bool nan = false;
    for (const float v : s) {
      nan = nan || v != v;
      M = std::max(M, v);
    }
    if (nan || !std::isfinite(M)) {
      degenerate_row(x, V, tokens + r, logprobs + r);
      continue;
    }
    double total = 0, kept_total = 0;
    if (filters(p)) keep_mask(s.data(), p, keep.data(), order);
    const auto drawable = [&](int64_t i) { return keep[std::size_t(i)] && s[std::size_t(i)] - M >= kUnderflow; };
    for (int64_t i = 0; i < V; ++i) {
      const double w = std::exp(double(s[std::size_t(i)]) - M);
      total += w;
      if (drawable(i)) kept_total += w;
    }
    int64_t token = std::find(s.begin(), s.end(), M) - s.begin();
    if (!is_greedy(p)) {
      const double target = double(uniforms[r]) * kept_total;
      double acc = 0;
      for (int64_t i = 0; i < V; ++i) {
        if (!drawable(i)) continue;
        token = i;
        acc += std::exp(double(s[std::size_t(i)]) - M);
        if (acc > target) break;
      }
    }
    tokens[r] = token;
    logprobs[r] = float(double(s[std::size_t(token)]) - (double(M) + std::log(total)));
  }
}

}  // namespace unstuck::rollout
