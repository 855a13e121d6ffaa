// Private: the per-ISA CPU kernel entry points behind rounding.cpp and fused_adamw.cpp. Each works on
// one contiguous range whose first element has global index `index0`; threading and dispatch live in
// the callers. Every ISA returns bit-identical results (tests check it against the scalar path).
#pragma once

#include <cstddef>
#include <cstdint>

#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision::cpu {

// One AdamW segment range: element i is master[i], grad[i], ... with global index index0 + i.
struct AdamWRange {
  float* master;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  void* compute;  // already offset to element 0 of the range
  std::size_t n;
  uint64_t index0;
  bool decay;
};

// fp8_<isa>: src[0, n) (global index index0 + i), all in one FP8 channel with the powers down = 2^-e
// and up = 2^e (fp8_fast_exponent(e)), rounded by fp8_e4m3_scaled_fast (fp8.h) into dst; SR takes each
// element's sr_bits_fp16.
#define UNSTUCK_DECLARE_CPU_KERNELS(isa)                                                                    \
  void round_##isa(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key, uint64_t index0); \
  uint64_t adamw_##isa(const AdamWRange& range, const AdamWScalars& s, RoundMode mode, SrKey key);          \
  void fp8_##isa(const float* src, uint16_t* dst, std::size_t n, uint64_t index0, float down, float up,     \
                 bool stochastic, SrKey key);

UNSTUCK_DECLARE_CPU_KERNELS(scalar)
UNSTUCK_DECLARE_CPU_KERNELS(avx2)
UNSTUCK_DECLARE_CPU_KERNELS(avx512)
#undef UNSTUCK_DECLARE_CPU_KERNELS

// Scalar per-element helpers shared by every ISA for range heads and tails.
inline uint32_t sr_bits(RoundMode mode, SrKey key, uint64_t index) {
  if (mode == RoundMode::bf16_sr) return sr_bits_bf16(key.seed, key.step, index);
  if (mode == RoundMode::fp16_sr) return sr_bits_fp16(key.seed, key.step, index);
  return 0;
}

// Rounds x for `mode`; the result holds 16-bit patterns, or the FP32 bits for RoundMode::fp32.
inline uint32_t round_element(float x, RoundMode mode, SrKey key, uint64_t index) {
  switch (mode) {
    case RoundMode::fp32:
      return float_bits(x);
    case RoundMode::bf16_rn:
      return bf16_rn(x);
    case RoundMode::bf16_sr:
      return bf16_sr(x, sr_bits(mode, key, index));
    case RoundMode::fp16_rn:
      return fp16_rn(x);
    case RoundMode::fp16_sr:
      return fp16_sr(x, sr_bits(mode, key, index));
  }
  return 0;
}

// Writes a rounded element and reports whether it changed the stored value.
inline bool store_element(void* dst, std::size_t i, uint32_t bits, RoundMode mode) {
  if (mode == RoundMode::fp32) {
    uint32_t* d = static_cast<uint32_t*>(dst);
    const bool changed = d[i] != bits;
    d[i] = bits;
    return changed;
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
  const bool changed = d[i] != uint16_t(bits);
  d[i] = uint16_t(bits);
  return changed;
}

}  // namespace unstuck::precision::cpu
