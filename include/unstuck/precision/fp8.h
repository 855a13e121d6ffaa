// FP8 E4M3FN compute weights with a power-of-two scale per output channel (precision.mode fp8_rn /
// fp8_sr): the per-element rule and the scale rule of the FP8 contract (docs/PRECISION.md). A scaled
// E4M3 value (at most 4 significant bits, times a power of two) is exactly a BF16 value, so the
// compute weights are BF16 tensors holding FP8 values x scale, and every forward path runs unchanged.
// UNSTUCK_HD like round_math.h: one definition for the CPU and any device kernel.
#pragma once

#include <cstdint>

#include "unstuck/common/hd.h"
#include "unstuck/precision/round_math.h"

namespace unstuck::precision {

// E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; the largest finite value is
// 448 = 1.75 x 2^8, the smallest normal 2^-6, the subnormals multiples of 2^-9.
constexpr float kE4m3Max = 448.0f;
constexpr int kE4m3MantissaBits = 3;

// The scale exponent of a channel whose largest finite |x| is `amax` (>= 0): the smallest integer e
// with amax <= 448 x 2^e, computed from amax's bits (no division, no log). amax 0 (an all-zero row):
// e = 0. With it every finite x of the channel has |x| / 2^e <= 448, so nothing saturates, and the
// scale moves only when amax crosses a power of two times 448 (a grid point of the scale, not noise).
//   amax 448 -> 0; 448.5 -> 1; 1 -> -8 (1 <= 448 / 256 = 1.75); 1.75 -> -8; 1.76 -> -7
UNSTUCK_HD int fp8_scale_exponent(float amax) {
  uint32_t b = float_bits(amax) & 0x7FFFFFFFu;
  if (b == 0) return 0;
  int exp = int(b >> 23);         // biased exponent
  uint32_t mant = b & 0x7FFFFFu;  // amax = 1.mant x 2^(exp - 127) for normals
  if (exp == 0) {                 // a subnormal amax: normalize it
    exp = 1;
    while (!(mant & 0x800000u)) {
      mant <<= 1;
      --exp;
    }
    mant &= 0x7FFFFFu;
  }
  // amax = f x 2^k with f = 1.mant / 2 in [0.5, 1), k = exp - 126; 448 = 0.875 x 2^9. The smallest e
  // with f x 2^k <= 0.875 x 2^(9 + e) is k - 9 when f <= 0.875 (1.mant <= 1.75), else k - 8.
  const int k = exp - 126;
  return mant <= 0x600000u ? k - 9 : k - 8;
}

// 2^e as a double (exact for every e a float's scale needs, |e| < 1000).
UNSTUCK_HD double fp8_pow2(int e) {
  double s = 1.0;
  const double step = e >= 0 ? 2.0 : 0.5;
  for (int i = e >= 0 ? e : -e; i > 0; --i) s *= step;
  return s;
}

// x / 2^e rounded onto E4M3FN's grid, times 2^e, as a BF16 pattern; nearest-even (stochastic:
// false) or stochastic with the 32 random bits r32 (sr_bits_fp16 of the element, as every 32-bit
// SR element). The scaled value q = x / 2^e is exact (computed in double).
// * |q| >= 2^-6 (E4M3's normal range): the nearest (ties to an even mantissa) of the two neighbours
//   with 3 mantissa bits; SR adds the top 20 random bits to the 20 dropped bits of q's FP32 pattern
//   and truncates: P(up) = position exactly (bf16_coarse_rn / bf16_coarse_sr at 3 bits).
// * |q| < 2^-6 (subnormals, step 2^-9): y = |q| x 2^9, its fraction f exact in double; RN: f > 1/2
//   up, f = 1/2 to even; SR: up when the top 31 random bits are below floor(f x 2^31) (exact to
//   2^-31 of a step, as FP16's subnormal SR).
// * Saturation: |q| > 448 (only an infinity, or a scale from another channel) gives +-448; E4M3FN has
//   no infinity. NaN gives BF16's canonical NaN 0x7FC0 (the channel's scale ignores it). Signs of
//   zeros are kept. Exact values never move, also under SR.
// * The product with 2^e is exact in BF16 unless it falls below BF16's normal range (|value| <
//   2^-126, a channel scale below 2^-117), where BF16's own nearest rounding applies.
// fp8_e4m3_scaled(x, e, ...) == fp8_e4m3_scaled_by(x, 2^-e, 2^e, ...); the kernels take the powers
// once per row.
UNSTUCK_HD uint16_t fp8_e4m3_scaled_by(float x, double down, double up, bool stochastic, uint32_t r32) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  const bool negative = (b >> 31) != 0;
  const double q = double(bits_float(b & 0x7FFFFFFFu)) * down;  // |x| / 2^e, exact
  double r;                                                     // |q| rounded onto the grid
  if (q > double(kE4m3Max)) {
    r = double(kE4m3Max);
  } else if (q >= 0.015625) {  // 2^-6: q is an exact normal float here
    const float qf = float(q);
    r = double(
        bf16_to_float(stochastic ? bf16_coarse_sr(qf, kE4m3MantissaBits, r32) : bf16_coarse_rn(qf, kE4m3MantissaBits)));
    if (r > double(kE4m3Max)) r = double(kE4m3Max);  // unreachable for |q| <= 448: 448 is on the grid
  } else {
    const double y = q * 512.0;  // in [0, 8): exact
    const double lo = double(int(y));
    const double f = y - lo;  // exact
    bool up;
    if (stochastic) {
      up = (r32 >> 1) < uint32_t(f * 2147483648.0);
    } else {
      up = f > 0.5 || (f == 0.5 && (int(lo) & 1));
    }
    r = (lo + (up ? 1.0 : 0.0)) / 512.0;
  }
  const float value = float(r * up);
  const uint16_t h = bf16_rn(value);
  return negative ? uint16_t(h | 0x8000u) : h;
}

UNSTUCK_HD uint16_t fp8_e4m3_scaled(float x, int e, bool stochastic, uint32_t r32) {
  return fp8_e4m3_scaled_by(x, fp8_pow2(-e), fp8_pow2(e), stochastic, r32);
}

// fp8_e4m3_scaled_by in FP32 arithmetic, bit for bit the same result when the channel's powers are
// normal floats (|e| <= 126; `down` = 2^-e, `up` = 2^e): scaling by a power of two is exact whenever
// the scaled value is a normal float, and where |x| x 2^-e falls below FP32's normal range both give
// 0 (RN: far below half a step; SR: a position under 2^-31 of a step). What the CPU kernel runs.
UNSTUCK_HD uint16_t fp8_e4m3_scaled_fast(float x, float down, float up, bool stochastic, uint32_t r32) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  const float q = bits_float(b & 0x7FFFFFFFu) * down;
  float r;
  if (q > kE4m3Max) {
    r = kE4m3Max;
  } else if (q >= 0.015625f) {
    r = bf16_to_float(stochastic ? bf16_coarse_sr(q, kE4m3MantissaBits, r32) : bf16_coarse_rn(q, kE4m3MantissaBits));
  } else {
    const float y = q * 512.0f;  // exact
    const float lo = float(int(y));
    const float f = y - lo;  // exact
    const bool up_ = stochastic ? (r32 >> 1) < uint32_t(f * 2147483648.0f) : f > 0.5f || (f == 0.5f && (int(lo) & 1));
    r = (lo + (up_ ? 1.0f : 0.0f)) * 0.001953125f;  // x 2^-9, exact
  }
  const uint16_t h = bf16_rn(r * up);
  return (b >> 31) ? uint16_t(h | 0x8000u) : h;
}

// Whether channel exponent e takes fp8_e4m3_scaled_fast: its powers 2^-e and 2^e are normal floats.
// The CPU and device kernels choose their path by it.
UNSTUCK_HD bool fp8_fast_exponent(int e) { return e >= -126 && e <= 126; }

// The E4M3FN code of a value this rule produced (its BF16 pattern h and the channel's exponent e):
// for an FP8 export. NaN -> 0x7F.
UNSTUCK_HD uint8_t fp8_e4m3_code(uint16_t h, int e) {
  if ((h & 0x7FFFu) > 0x7F80u) return 0x7F;
  const uint8_t sign = uint8_t((h >> 8) & 0x80u);
  const double q = double(bf16_to_float(uint16_t(h & 0x7FFFu))) * fp8_pow2(-e);
  if (q == 0.0) return sign;
  if (q < 0.015625) return uint8_t(sign | uint8_t(q * 512.0));  // subnormal: exponent field 0
  const uint32_t qb = float_bits(float(q));
  const uint32_t exp = (qb >> 23) - 127 + 7;  // rebias
  return uint8_t(sign | (exp << 3) | ((qb >> 20) & 7u));
}

}  // namespace unstuck::precision
