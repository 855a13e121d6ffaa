// Private: the fixed-order arithmetic our torch-free CPU kernels share (decode attention, RMSNorm,
// the fused sampler). Sums run over 16 lanes in an order the code fixes, not the vector width, and
// exp is a polynomial of plain operations, so the scalar, AVX2 and AVX-512 clones the compiler makes
// of a kernel (UNSTUCK_ISA_CLONES) compute the same operations in the same order.
#pragma once

#include <cstdint>

#include "unstuck/precision/round_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define UNSTUCK_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define UNSTUCK_ISA_CLONES
#endif
#define UNSTUCK_INLINE inline __attribute__((always_inline))
// The per-element functions below run in CUDA kernels too (the device twins), with the same bits.
#if defined(__CUDACC__)
#define UNSTUCK_LANE_FN __host__ __device__ __forceinline__
#else
#define UNSTUCK_LANE_FN UNSTUCK_INLINE
#endif

namespace unstuck::lanes {

constexpr int kLanes = 16;

// Bit casts shared with the rounding kernels (precision/round_math.h).
UNSTUCK_LANE_FN int32_t bits_of(float x) { return int32_t(precision::float_bits(x)); }
UNSTUCK_LANE_FN float float_of(int32_t b) { return precision::bits_float(uint32_t(b)); }

constexpr float kNegInf = -__builtin_inff();

// Element types of our kernels' buffers, computed in FP32. `round` is the rounding libtorch's ops
// apply to an intermediate result of that dtype (none in FP32; BF16 round-to-nearest-even, NaN as
// libtorch's 0x7FC0), so a kernel rounds where the op-by-op path does.
struct F32 {
  using T = float;
  UNSTUCK_LANE_FN static float load(const float* p) { return *p; }
  UNSTUCK_LANE_FN static float round(float x) { return x; }
  UNSTUCK_LANE_FN static void store(float* p, float x) { *p = x; }
};
struct BF16 {
  using T = uint16_t;
  UNSTUCK_LANE_FN static float load(const uint16_t* p) { return precision::bf16_to_float(*p); }
  UNSTUCK_LANE_FN static float round(float x) { return precision::bf16_to_float(precision::bf16_rn(x)); }
  UNSTUCK_LANE_FN static void store(uint16_t* p, float x) { *p = precision::bf16_rn(x); }
};

// Lane j accumulates the elements j, j + 16, ...; the lanes fold pairwise (8, 4, 2, 1). The order is
// fixed by the code, not by the vector width, so every clone sums alike.
UNSTUCK_LANE_FN float fold(float (&acc)[kLanes]) {
  static_assert(kLanes == 16);
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (int j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  acc[0] += acc[2];
  acc[1] += acc[3];
  return acc[0] + acc[1];
}

// The largest of 16 lanes, folded pairwise (8, 4, 2, 1) as fold() sums them.
UNSTUCK_LANE_FN float fold_max(float (&acc)[kLanes]) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = acc[j + w] > acc[j] ? acc[j + w] : acc[j];
  return acc[0];
}

// The largest of x[0, n) (-inf when n = 0); NaN elements are passed over.
UNSTUCK_INLINE float max_of(const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = kNegInf;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  for (int j = 0; i + j < n; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  return fold_max(acc);
}

// Cephes' expf core for x in [-87, 89]: x = n ln2 + r with |r| <= ln2 / 2 (ln 2 split in two so
// n ln2 is exact) and a degree-6 polynomial for e^r, returned; n comes from adding 1.5 * 2^23, which
// rounds x / ln2 to an integer held in the low mantissa bits of *t (no conversion instruction the
// baseline ISA lacks), for the caller to put into an exponent.
UNSTUCK_LANE_FN float exp_reduced(float xc, float* t) {
  *t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = *t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

// 2^(n + shift) for the n that exp_reduced left in t's low mantissa bits.
UNSTUCK_LANE_FN float exp2_of(float t, int32_t shift) {
  return float_of((bits_of(t) - 0x4B400000 + 127 + shift) << 23);
}

// exp(x) for x <= 0 (a score minus the row's maximum), 0 for -inf. x is clamped at -87 so 2^n stays a
// normal float; e^-87 (1.6e-38) is negligible next to the row maximum's term, 1. Every operation
// comes before the select, none inside it (GCC does not if-convert a floating-point operation that
// might trap, which would keep the loops around it scalar on AVX2).
UNSTUCK_LANE_FN float exp_nonpositive(float x) {
  float t;
  const float y = exp_reduced(x < -87.0f ? -87.0f : x, &t);
  const float e = y * exp2_of(t, 0);
  return x == kNegInf ? 0.0f : e;
}

// exp(x) over the whole float range, for SiLU's exp(-g): 2^n applied as 2^(n-1) * 2 for x > 0, so
// e^x up to the float maximum stays representable and beyond it is inf. x below -87 gives e^-87 (next
// to the 1 it is added to, nothing); NaN stays NaN.
UNSTUCK_LANE_FN float exp_any(float x) {
  float t;
  const float y = exp_reduced(x < -87.0f ? -87.0f : (x > 89.0f ? 89.0f : x), &t);
  const bool positive = x > 0.0f;
  const float e = y * exp2_of(t, positive ? -1 : 0), doubled = e * 2.0f;  // both, then a select
  return positive ? doubled : e;
}

// log(x) for a positive normal float: Cephes' logf (x = m 2^e with m in [sqrt(1/2), sqrt(2)), a
// degree-9 polynomial in m - 1, ln 2 split in two), within 1 ulp; plain operations, so a device twin
// computes the same bits.
UNSTUCK_LANE_FN float log_positive(float x) {
  const int32_t bits = bits_of(x);
  int32_t e = ((bits >> 23) & 0xFF) - 126;               // x = m * 2^e with m in [0.5, 1)
  float m = float_of((bits & 0x007FFFFF) | 0x3F000000);  // m
  if (m < 0.707106781186547524f) {
    e -= 1;
    m = m + m - 1.0f;
  } else {
    m = m - 1.0f;
  }
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  const float fe = float(e);
  y += -2.12194440e-4f * fe;
  y += -0.5f * z;
  return (m + y) + 0.693359375f * fe;
}

}  // namespace unstuck::lanes
