// FP32 CPU kernels of the model's no-gradient path (src/model/cpu_kernels.h): decode
// attention, RMSNorm, rotary embedding. Every sum runs over 16 lanes in an order the code fixes, not
// the vector width, and exp is a polynomial of plain operations, so the scalar, AVX2 and AVX-512
// clones the compiler makes of each kernel compute the same operations in the same order.
#include "model/cpu_kernels.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#define UNSTUCK_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define UNSTUCK_ISA_CLONES
#endif
#define UNSTUCK_INLINE inline __attribute__((always_inline))

namespace unstuck::model {
namespace {

constexpr int kLanes = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Element types of the decode kernel's tensors, computed in FP32. `round` is the rounding libtorch's
// ops apply to an intermediate result of that dtype (none in FP32; BF16 round-to-nearest-even, NaN
// as libtorch's quiet NaN 0x7FC0), so the kernel rounds where the batched products of the BF16 path do.
struct F32 {
  using T = float;
  static float load(const float* p) { return *p; }
  static float round(float x) { return x; }
  static void store(float* p, float x) { *p = x; }
};
struct BF16 {
  using T = uint16_t;
  static float load(const uint16_t* p) {
    const uint32_t u = uint32_t(*p) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static uint16_t bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return x != x ? uint16_t(0x7FC0) : uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  static float round(float x) {
    const uint16_t b = bits(x);
    return load(&b);
  }
  static void store(uint16_t* p, float x) { *p = bits(x); }
};

// Lane j accumulates the elements j, j + 16, ...; the lanes fold pairwise (8, 4, 2, 1). The order is
// fixed by the code, not by the vector width, so every clone sums alike.
UNSTUCK_INLINE float fold(float (&acc)[kLanes]) {
  static_assert(kLanes == 16);
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  acc[0] += acc[2];
  acc[1] += acc[3];
  return acc[0] + acc[1];
}

template <class E = F32>
UNSTUCK_INLINE float dot(const float* a, const typename E::T* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * E::load(b + i + j);
  for (int j = 0; i + j < n; ++j) acc[j] += a[i + j] * E::load(b + i + j);
  return fold(acc);
}

UNSTUCK_INLINE float max_of(const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = kNegInf;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  for (int j = 0; i + j < n; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = acc[j + w] > acc[j] ? acc[j + w] : acc[j];
  return acc[0];
}

// exp(x) for x <= 0 (a score minus the row's maximum), 0 for -inf. Cephes' expf: x = n ln2 + r with
// |r| <= ln2 / 2 (ln 2 split in two so n ln2 is exact), a degree-6 polynomial for e^r, and 2^n put in
// the exponent bits. n comes from adding 1.5 * 2^23, which rounds x / ln2 to an integer held in the
// low mantissa bits (no conversion instruction the baseline ISA lacks). x is clamped at -87 so 2^n
// stays a normal float; e^-87 (1.6e-38) is negligible next to the row maximum's term, 1.
UNSTUCK_INLINE float exp_nonpositive(float x) {
  const float xc = x < -87.0f ? -87.0f : x;
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  const int32_t exponent = (bits - 0x4B400000 + 127) << 23;  // n + 127 in the exponent field
  float two_n;
  std::memcpy(&two_n, &exponent, sizeof two_n);
  return x == kNegInf ? 0.0f : y * two_n;
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
