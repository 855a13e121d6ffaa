// FP32 CPU kernels of the model's no-gradient path (src/model/cpu_kernels.h): decode
// attention, RMSNorm, rotary embedding. Every sum runs over 16 lanes in an order the code fixes, not
// the vector width, and exp is a polynomial of plain operations (src/precision/lane_math.h), so the
// scalar, AVX2 and AVX-512 clones the compiler makes of each kernel compute alike.
#include "model/cpu_kernels.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "precision/lane_math.h"
#include "model/layer_kernels.h"

namespace unstuck::model {
namespace {

using lanes::exp_nonpositive;
using lanes::fold;
using lanes::kLanes;
using lanes::kNegInf;
using lanes::max_of;

using lanes::BF16;
using lanes::F32;

template <class E = F32>
UNSTUCK_INLINE float dot(const float* a, const typename E::T* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * E::load(b + i + j);
  for (int j = 0; i + j < n; ++j) acc[j] += a[i + j] * E::load(b + i + j);
  return fold(acc);
}

// The kernel for head dimension HD (0: any, read from the shape). A compile-time HD keeps the
// query, the lanes and the value accumulator in registers.
template <class E, int HD>
UNSTUCK_INLINE void attend(const typename E::T* q, const typename E::T* k, const typename E::T* v,
                           const typename E::T* bias, typename E::T* out, const DecodeAttentionShape& shape,
                           float scale, int64_t first, int64_t last) {
  using T = typename E::T;
  const int64_t H = shape.heads, G = shape.kv_heads, hd = HD > 0 ? HD : shape.head_dim, A = shape.slots,
                L = shape.filled;
  const int64_t R = H / G;  // query heads per KV head
  std::vector<float> qs(static_cast<std::size_t>(R * hd)), scores(static_cast<std::size_t>(R * L)),
      acc_any(static_cast<std::size_t>(HD > 0 ? 0 : hd));  // the value accumulator without a fixed HD
  for (int64_t bg = first; bg < last; ++bg) {
    const int64_t b = bg / G, g = bg % G;
    const T* keys = k + bg * A * hd;  // (A, hd)
    const T* values = v + bg * A * hd;
    const T* row_bias = bias + b * A;
    for (int64_t r = 0; r < R; ++r) {
      const T* qh = q + b * shape.q_row_stride + (g * R + r) * hd;
      for (int64_t d = 0; d < hd; ++d) qs[std::size_t(r * hd + d)] = E::round(E::load(qh + d) * scale);
    }
    // Each (row, KV head) reads L of its A slots, so the cache is not one linear stream that the
    // hardware prefetcher follows: fetch the key and value rows of the pair two ahead (measured:
    // 29.6-30.6k tok/s one ahead, 30.8k two ahead, 25.5k without, bench generate fp32, 1 thread).
    const bool prefetch_ahead = bg + 2 < last;
    for (int64_t c = 0; c < L; ++c) {  // (R, L) scores; a hidden slot's key is not read
      if (prefetch_ahead)
        for (int64_t line = 0; line < hd; line += 16) {
          __builtin_prefetch(keys + 2 * A * hd + c * hd + line);
          __builtin_prefetch(values + 2 * A * hd + c * hd + line);
        }
      const float slot_bias = E::load(row_bias + c);
      const bool hidden = slot_bias == kNegInf;
      for (int64_t r = 0; r < R; ++r)  // the product rounded to the dtype, then the bias added in it
        scores[std::size_t(r * L + c)] =
            hidden ? kNegInf : E::round(E::round(dot<E>(&qs[std::size_t(r * hd)], keys + c * hd, hd)) + slot_bias);
    }
    for (int64_t r = 0; r < R; ++r) {
      float* __restrict s = &scores[std::size_t(r * L)];
      T* __restrict o = out + (b * H + g * R + r) * hd;
      const float m = max_of(s, L);
      if (m == kNegInf) {  // nothing visible (a row with no real token): zeros, not NaN
        for (int64_t d = 0; d < hd; ++d) E::store(o + d, 0.0f);
        continue;
      }
      float sums[kLanes] = {};
      int64_t c = 0;
      for (; c + kLanes <= L; c += kLanes)
        for (int j = 0; j < kLanes; ++j) sums[j] += (s[c + j] = exp_nonpositive(s[c + j] - m));
      for (int j = 0; c + j < L; ++j) sums[j] += (s[c + j] = exp_nonpositive(s[c + j] - m));
      const float total = fold(sums);
      float acc_fixed[HD > 0 ? HD : 1];  // in registers when HD is fixed
      float* __restrict a = HD > 0 ? acc_fixed : acc_any.data();
      for (int64_t d = 0; d < hd; ++d) a[d] = 0.0f;
      for (c = 0; c < L; ++c) {
        const float p = E::round(s[c] / total);  // probabilities in the dtype, as the BF16 path casts them
        if (p == 0.0f) continue;                 // hidden (or underflowed) slot: its value is not read
        const T* __restrict vrow = values + c * hd;
        for (int64_t d = 0; d < hd; ++d) a[d] += p * E::load(vrow + d);
      }
      for (int64_t d = 0; d < hd; ++d) E::store(o + d, a[d]);
    }
  }
}

// attend<E, HD> for the head dimensions with a compiled specialization, else the generic one.
template <class E>
UNSTUCK_INLINE void attend_any(const typename E::T* q, const typename E::T* k, const typename E::T* v,
                               const typename E::T* bias, typename E::T* out, const DecodeAttentionShape& shape,
                               float scale, int64_t first, int64_t last) {
  switch (shape.head_dim) {
    case 32:
      return attend<E, 32>(q, k, v, bias, out, shape, scale, first, last);
    case 64:
      return attend<E, 64>(q, k, v, bias, out, shape, scale, first, last);
    case 128:
      return attend<E, 128>(q, k, v, bias, out, shape, scale, first, last);
    default:
      return attend<E, 0>(q, k, v, bias, out, shape, scale, first, last);
  }
}

}  // namespace

UNSTUCK_ISA_CLONES
void decode_attention_f32(const float* q, const float* k, const float* v, const float* bias, float* out,
                          const DecodeAttentionShape& shape, float scale, int64_t first, int64_t last) {
  attend_any<F32>(q, k, v, bias, out, shape, scale, first, last);
}

UNSTUCK_ISA_CLONES
void decode_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* bias, uint16_t* out,
                           const DecodeAttentionShape& shape, float scale, int64_t first, int64_t last) {
  attend_any<BF16>(q, k, v, bias, out, shape, scale, first, last);
}

UNSTUCK_ISA_CLONES
void rms_norm_f32(const float* x, const float* weight, float* out, int64_t dim, float eps, int64_t first,
                  int64_t last) {
  for (int64_t r = first; r < last; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    const float mean = dot(xr, xr, dim) / float(dim);
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (int64_t d = 0; d < dim; ++d) o[d] = weight[d] * (xr[d] * inv);
  }
}

namespace {

template <class E>
UNSTUCK_INLINE void add_norm_rows(const typename E::T* x, const typename E::T* y, const typename E::T* weight,
                                  typename E::T* sum, typename E::T* out, int64_t dim, float eps, int64_t first,
                                  int64_t last) {
  std::vector<float> s(static_cast<std::size_t>(dim));
  for (int64_t r = first; r < last; ++r) {
    const int64_t o = r * dim;
    for (int64_t d = 0; d < dim; ++d) s[std::size_t(d)] = E::round(E::load(x + o + d) + E::load(y + o + d));
    const float mean = dot(s.data(), s.data(), dim) / float(dim);
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (int64_t d = 0; d < dim; ++d) {
      E::store(sum + o + d, s[std::size_t(d)]);
      E::store(out + o + d, normed<E>(s[std::size_t(d)], inv, E::load(weight + d)));
    }
  }
}

template <class E>
UNSTUCK_INLINE void silu_mul_rows(const typename E::T* gate_up, typename E::T* out, int64_t F, int64_t first,
                                  int64_t last) {
  for (int64_t r = first; r < last; ++r) {
    const typename E::T* g = gate_up + r * 2 * F;
    typename E::T* o = out + r * F;
    for (int64_t f = 0; f < F; ++f) {
      E::store(o + f, silu_times<E>(E::load(g + f), E::load(g + F + f)));
    }
  }
}

}  // namespace

UNSTUCK_ISA_CLONES
void add_rms_norm_f32(const float* x, const float* y, const float* weight, float* sum, float* out, int64_t dim,
                      float eps, int64_t first, int64_t last) {
  add_norm_rows<F32>(x, y, weight, sum, out, dim, eps, first, last);
}

UNSTUCK_ISA_CLONES
void add_rms_norm_bf16(const uint16_t* x, const uint16_t* y, const uint16_t* weight, uint16_t* sum, uint16_t* out,
                       int64_t dim, float eps, int64_t first, int64_t last) {
  add_norm_rows<BF16>(x, y, weight, sum, out, dim, eps, first, last);
}

UNSTUCK_ISA_CLONES
void silu_mul_f32(const float* gate_up, float* out, int64_t F, int64_t first, int64_t last) {
  silu_mul_rows<F32>(gate_up, out, F, first, last);
}

UNSTUCK_ISA_CLONES
void silu_mul_bf16(const uint16_t* gate_up, uint16_t* out, int64_t F, int64_t first, int64_t last) {
  silu_mul_rows<BF16>(gate_up, out, F, first, last);
}

UNSTUCK_ISA_CLONES
void rope_f32(float* x, const float* cos, const float* sin, int64_t heads, int64_t hd, int64_t row_stride,
              int64_t first, int64_t last) {
  const int64_t half = hd / 2;
  for (int64_t r = first; r < last; ++r) {
    const float* c = cos + r * hd;
    const float* s = sin + r * hd;
    for (int64_t h = 0; h < heads; ++h) {
      float* __restrict v = x + r * row_stride + h * hd;
      for (int64_t d = 0; d < half; ++d) {  // first half: x1 * c - x2 * s; second: x2 * c + x1 * s
        const float x1 = v[d], x2 = v[d + half];
        v[d] = x1 * c[d] + (-x2) * s[d];
        v[d + half] = x2 * c[d + half] + x1 * s[d + half];
      }
    }
  }
}

void decode_attention_reference(const float* q, const float* k, const float* v, const float* bias, float* out,
                                const DecodeAttentionShape& shape, float scale, int64_t batch) {
  const int64_t H = shape.heads, G = shape.kv_heads, hd = shape.head_dim, A = shape.slots, L = shape.filled;
  std::vector<double> s(static_cast<std::size_t>(L));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      const float* qh = q + b * shape.q_row_stride + h * hd;
      double m = -INFINITY;
      for (int64_t c = 0; c < L; ++c) {
        double dotp = 0;
        for (int64_t d = 0; d < hd; ++d) dotp += double(qh[d]) * scale * k[((b * G + g) * A + c) * hd + d];
        s[std::size_t(c)] = dotp + bias[b * A + c];
        m = std::max(m, s[std::size_t(c)]);
      }
      double total = 0;
      for (int64_t c = 0; c < L; ++c)
        total += (s[std::size_t(c)] = m == -INFINITY ? 0.0 : std::exp(s[std::size_t(c)] - m));
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0;
        for (int64_t c = 0; c < L; ++c) o += s[std::size_t(c)] / total * v[((b * G + g) * A + c) * hd + d];
        out[(b * H + h) * hd + d] = m == -INFINITY ? 0.0f : float(o);
      }
    }
}

}  // namespace unstuck::model
