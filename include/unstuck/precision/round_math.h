// Per-element math of the precision kernels: FP32 -> BF16 / FP16 rounding (nearest-even and
// stochastic), the stochastic-rounding random-bit schedule, and one AdamW element update.
// Everything here is UNSTUCK_HD: the CPU scalar path, the SIMD paths' reference in the tests and the
// CUDA kernels all call (or are checked against) exactly these functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "unstuck/common/hd.h"
#include "unstuck/precision/philox.h"

namespace unstuck::precision {

constexpr uint16_t kBf16CanonicalNan = 0x7FC0;  // what c10::BFloat16 produces for any NaN
constexpr uint16_t kFp16CanonicalNan = 0x7E00;

UNSTUCK_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

UNSTUCK_HD float bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

UNSTUCK_HD float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

// ---- BF16 -----------------------------------------------------------------------------------------

// Round to nearest, ties to even. Bit-identical to c10::BFloat16's conversion: values at or above
// max_bf16 + half an ulp become +-Inf, NaN becomes 0x7FC0.
UNSTUCK_HD uint16_t bf16_rn(float x) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// Stochastic rounding with 16 random bits r16 (uniform on [0, 65536)).
// BF16 keeps the top 16 bits of the FP32 pattern; the dropped low 16 bits L are the position of |x|
// between its two BF16 neighbours in units of 2^-16 of their gap (FP32 is linear in its bit pattern
// inside a binade, and a carry out of the mantissa moves to the next binade correctly). Adding r16
// carries into the kept bits exactly when r16 >= 65536 - L, i.e. with probability L / 65536:
// E[result] = x exactly, for normals and subnormals alike, with no approximation.
// Edges: exactly representable values (L = 0) never move; +-Inf stay; NaN -> 0x7FC0; above the
// largest finite BF16 the next value up is 2^128, which BF16 writes as Inf, so |x| in
// (max_bf16, FLT_MAX] becomes Inf with probability (|x| - max_bf16) / ulp.
UNSTUCK_HD uint16_t bf16_sr(float x, uint32_t r16) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  return uint16_t((b + (r16 & 0xFFFFu)) >> 16);
}

// ---- the grid-scaled analog: BF16 with fewer mantissa bits -----------------------------------------
// A grid-scaled analog of BF16 (not a real format): x rounded to `mantissa_bits` explicit mantissa
// bits (1..7; 7 is BF16 itself) with BF16's exponent range, written as a BF16 pattern whose low
// 7 - mantissa_bits mantissa bits are zero. Its ulp is 2^(7 - mantissa_bits) times BF16's at every
// magnitude, so the same drift is that many times fewer half-ulps. The d = 23 - mantissa_bits dropped
// FP32 bits are the position between the two neighbours, exactly as in bf16_rn / bf16_sr (which these
// equal bit for bit at 7 bits); the same edges: Inf stays, NaN -> 0x7FC0, a carry past the largest
// finite value gives Inf.
UNSTUCK_HD uint16_t bf16_coarse_rn(float x, int mantissa_bits) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  const int d = 23 - mantissa_bits;
  const uint32_t r = b + ((1u << (d - 1)) - 1u) + ((b >> d) & 1u);
  return uint16_t((r >> d << d) >> 16);
}

// Stochastic rounding to `mantissa_bits` with the top d = 23 - mantissa_bits of 32 random bits:
// P(round up) = position / 2^d exactly (unbiased). At 7 bits: bf16_sr(x, r32 >> 16).
UNSTUCK_HD uint16_t bf16_coarse_sr(float x, int mantissa_bits, uint32_t r32) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  const int d = 23 - mantissa_bits;
  const uint32_t r = b + (r32 >> (32 - d));
  return uint16_t((r >> d << d) >> 16);
}

// ---- FP16 -----------------------------------------------------------------------------------------

UNSTUCK_HD float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) return bits_float(sign | float_bits(float(mant) * 5.9604644775390625e-8f));  // 2^-24
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest, ties to even (IEEE 754 binary16, as F16C's vcvtps2ph and c10::Half).
// |x| >= 65520 (65504 + half an ulp) -> +-Inf; NaN -> 0x7E00; subnormals rounded exactly.
UNSTUCK_HD uint16_t fp16_rn(float x) {
  const uint32_t b = float_bits(x);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kFp16CanonicalNan;
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);
  if (a >= 0x38800000u) {  // normal FP16 range, |x| >= 2^-14: rebias exponent 127 -> 15
    uint32_t t = a - (112u << 23);
    t += 0xFFFu + ((t >> 13) & 1u);  // nearest-even on the 13 dropped bits
    return uint16_t(sign | (t >> 13));
  }
  // Subnormal FP16 (multiples of 2^-24). Adding 0.5f puts |x| in [0.5, 1), where the FP32 ulp is
  // 2^-24, so the FPU's nearest-even addition rounds |x| to the FP16 grid; subtracting the bits of
  // 0.5f leaves the FP16 pattern (1024 = 0x400 is the smallest normal, also correct).
  const float shifted = bits_float(a) + 0.5f;
  return uint16_t(sign | (float_bits(shifted) - 0x3F000000u));
}

// Stochastic rounding with 32 random bits r32 (uniform on [0, 2^32)). Rounds |x| up to the next
// FP16 value with probability (|x| - lo) / (hi - lo), lo and hi its FP16 neighbours. Normal range:
// the 13 dropped mantissa bits are exactly that position, and adding 13 random bits carries with
// probability position / 2^13 (exact). Subnormal range (|x| < 2^-14, grid 2^-24): the position is
// computed exactly in FP32, truncated to 31 bits and compared with the top 31 random bits, so the
// probability is exact to 2^-31 (absolute bias below 2^-55). Edges: +-Inf stay, NaN -> 0x7E00,
// exact values never move, |x| in (65504, 65536) becomes Inf with probability (|x| - 65504) / 32
// (the next step of the format, 65536, is written as Inf), |x| >= 65536 -> Inf.
UNSTUCK_HD uint16_t fp16_sr(float x, uint32_t r32) {
  const uint32_t b = float_bits(x);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kFp16CanonicalNan;
  if (a >= 0x47800000u) return uint16_t(sign | 0x7C00u);
  if (a >= 0x38800000u) {
    const uint32_t t = a - (112u << 23) + (r32 >> 19);
    return uint16_t(sign | (t >> 13));
  }
  const float y = bits_float(a) * 16777216.0f;  // |x| / 2^-24 in [0, 1024): exact power-of-2 scale
  const uint32_t q = uint32_t(y);               // truncation = lower neighbour
  const float frac = y - float(q);              // exact (Sterbenz: q <= y < 2q, or q = 0)
  // 31 bits keep both sides below 2^31, so SIMD code can use signed compares and conversions.
  const uint32_t threshold = uint32_t(frac * 2147483648.0f);  // frac * 2^31 < 2^31
  return uint16_t(sign | (q + ((r32 >> 1) < threshold ? 1u : 0u)));
}

// ---- the random-bit schedule of the SR contract ---------------------------------------------------
// Key = run rounding seed; counter = (Philox block number, optimizer step). The bits of element i
// depend only on (seed, step, i): never on threads, SIMD width, chunking, shards or device.
// Elements are grouped in tiles of 16 Philox blocks, laid out so a 16-lane SIMD register of words is
// 16 consecutive elements (no transposes in any kernel):
//   BF16 (16 bits each): tile of 128 elements; element j of tile T takes block 16*T + j % 16,
//     word (j / 16) / 2, low half when (j / 16) is even, high half when odd.
//   FP16 (32 bits each): tile of 64 elements; element j of tile T takes block 16*T + j % 16,
//     word j / 16.
constexpr uint64_t kBf16SrTile = 128;
constexpr uint64_t kFp16SrTile = 64;

UNSTUCK_HD Philox4x32 sr_block(uint64_t seed, uint64_t step, uint64_t block) {
  return philox4x32_10(Philox4x32{{uint32_t(block), uint32_t(block >> 32), uint32_t(step), uint32_t(step >> 32)}},
                       uint32_t(seed), uint32_t(seed >> 32));
}

UNSTUCK_HD uint32_t sr_bits_bf16(uint64_t seed, uint64_t step, uint64_t index) {
  const uint64_t j = index % kBf16SrTile;
  const Philox4x32 r = sr_block(seed, step, (index / kBf16SrTile) * 16 + j % 16);
  const uint32_t k = uint32_t(j / 16);
  return (r.v[k >> 1] >> (16 * (k & 1))) & 0xFFFFu;
}

UNSTUCK_HD uint32_t sr_bits_fp16(uint64_t seed, uint64_t step, uint64_t index) {
  const uint64_t j = index % kFp16SrTile;
  return sr_block(seed, step, (index / kFp16SrTile) * 16 + j % 16).v[j / 16];
}

// ---- AdamW ----------------------------------------------------------------------------------------

// Per-step scalars, computed once on the host (bias corrections in double, then cast).
struct AdamWScalars {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;  // lr / (1 - beta1^t)
  float sqrt_bc2;   // sqrt(1 - beta2^t)
  float eps;
  float decay_factor;  // 1 - lr * weight_decay (decoupled decay), applied where the mask says so
  float grad_scale;    // multiplies the gradient first: 1 / loss_scale in the FP16 modes, else 1
};

// One AdamW element, in the order of torch.optim.AdamW (decay, moments, bias-corrected step).
// No fused multiply-add: the kernels are compiled without FP contraction so every backend gives
// the same bits.
UNSTUCK_HD void adamw_element(float& p, float& m, float& v, float g, bool decay, const AdamWScalars& s) {
  g = g * s.grad_scale;
  m = m * s.beta1 + s.one_minus_beta1 * g;
  v = v * s.beta2 + s.one_minus_beta2 * (g * g);
  if (decay) p = p * s.decay_factor;
#if defined(__CUDA_ARCH__)
  const float denom = __fsqrt_rn(v) / s.sqrt_bc2 + s.eps;
#else
  const float denom = __builtin_sqrtf(v) / s.sqrt_bc2 + s.eps;
#endif
  p = p - s.step_size * (m / denom);
}

}  // namespace unstuck::precision
