// Shared inputs and references of the precision tests: FP32 values that stress the rounding edges,
// and the scalar reference (round_math.h called element by element).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision::testing {

inline std::vector<RoundMode> all_round_modes() {
  return {RoundMode::fp32, RoundMode::bf16_rn, RoundMode::bf16_sr, RoundMode::fp16_rn, RoundMode::fp16_sr};
}

// Hand-picked edge values: signed zeros, FP32 and FP16 subnormals, NaNs (several payloads), +-Inf,
// neighbours of the BF16 and FP16 maxima and of FP16's smallest normal, and exact values.
inline std::vector<float> edge_values() {
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000,                                                              // +-0
      0x00000001, 0x807FFFFF, 0x00400000,                                                  // FP32 subnormals
      0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF,                          // NaNs
      0x7F800000, 0xFF800000,                                                              // +-Inf
      0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7FFFFF,                          // around max BF16, FLT_MAX
      0xFF7F8000, 0xFF7FFFFF, 0x33000000, 0x33800000, 0x33C00000, 0x387FFFFF, 0x38800000,  // FP16 subnormal range /
                                                                                           // 2^-14
      0x38000000, 0x37FFFFFF, 0x337FFFFF, 0xB3400000, 0x3F800000, 0xBF800000, 0x3F808000, 0x3F800001,
      0x3F8000FF,                          // 1 and its BF16 neighbours
      0x3F801000, 0x3F800FFF, 0x3F802000,  // FP16 ties / near ties
  };
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(bits_float(b));
  for (float x : {65504.0f, 65519.0f, 65519.996f, 65520.0f, 65535.0f, 65536.0f, 1e5f, -65520.0f, -65504.0f,
                  6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 1e-30f})
    v.push_back(x);
  return v;
}

// `n` values: the edge values, then random bit patterns (NaNs included) mixed with values that are
// exactly representable in BF16 or FP16, in a deterministic order.
inline std::vector<float> stress_values(std::size_t n, uint32_t seed) {
  std::vector<float> v = edge_values();
  std::mt19937 rng(seed);
  while (v.size() < n) {
    const uint32_t r = rng();
    switch (rng() % 4) {
      case 0:
        v.push_back(bits_float(r));
        break;  // anything
      case 1:
        v.push_back(bits_float(r & 0xFFFF0000u));
        break;  // BF16-exact
      case 2:
        v.push_back(fp16_to_float(uint16_t(r)));
        break;  // FP16-exact (or NaN/Inf)
      default:
        v.push_back(std::ldexp(float(r >> 8) / 16777216.0f, int(rng() % 40) - 20));
        break;
    }
  }
  v.resize(n);
  return v;
}

// Reference rounding of element i (global index index0 + i), straight from round_math.h.
inline uint32_t reference_round(float x, RoundMode mode, SrKey key, uint64_t index) {
  switch (mode) {
    case RoundMode::fp32:
      return float_bits(x);
    case RoundMode::bf16_rn:
      return bf16_rn(x);
    case RoundMode::bf16_sr:
      return bf16_sr(x, sr_bits_bf16(key.seed, key.step, index));
    case RoundMode::fp16_rn:
      return fp16_rn(x);
    case RoundMode::fp16_sr:
      return fp16_sr(x, sr_bits_fp16(key.seed, key.step, index));
  }
  return 0;
}

// Compute-weight buffer as 32-bit patterns (16-bit modes zero-extended) for easy comparison.
inline std::vector<uint32_t> as_bits(const std::vector<uint8_t>& raw, RoundMode mode) {
  const std::size_t bytes = compute_element_bytes(mode);
  std::vector<uint32_t> out(raw.size() / bytes);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (bytes == 4) {
      uint32_t b;
      std::memcpy(&b, raw.data() + 4 * i, 4);
      out[i] = b;
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = h;
    }
  }
  return out;
}

inline float decode(uint32_t bits, RoundMode mode) {
  switch (mode) {
    case RoundMode::fp32:
      return bits_float(bits);
    case RoundMode::bf16_rn:
    case RoundMode::bf16_sr:
      return bf16_to_float(uint16_t(bits));
    default:
      return fp16_to_float(uint16_t(bits));
  }
}

}  // namespace unstuck::precision::testing
