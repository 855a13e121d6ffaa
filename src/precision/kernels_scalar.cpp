// Scalar CPU kernels: the reference path, one call of the round_math.h functions per element. Also
// used for the heads and tails of ranges that the SIMD paths do not cover with whole tiles.
#include "cpu_kernels.h"
#include "unstuck/precision/fp8.h"

namespace unstuck::precision::cpu {

void round_scalar(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key, uint64_t index0) {
  for (std::size_t i = 0; i < n; ++i) store_element(dst, i, round_element(src[i], mode, key, index0 + i), mode);
}

uint64_t adamw_scalar(const AdamWRange& r, const AdamWScalars& s, RoundMode mode, SrKey key) {
  uint64_t changed = 0;
  for (std::size_t i = 0; i < r.n; ++i) {
    adamw_element(r.master[i], r.exp_avg[i], r.exp_avg_sq[i], r.grad[i], r.decay, s);
    changed += store_element(r.compute, i, round_element(r.master[i], mode, key, r.index0 + i), mode);
  }
  return changed;
}

void fp8_scalar(const float* src, uint16_t* dst, std::size_t n, uint64_t index0, float down, float up, bool stochastic,
                SrKey key) {
  // The SR words of one FP16-schedule tile (64 elements, 16 Philox blocks), computed once per tile:
  // word j of tile T is sr_bits_fp16(seed, step, 64 T + j).
  uint32_t words[kFp16SrTile];
  uint64_t tile = ~uint64_t(0);
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t g = index0 + i;
    uint32_t r32 = 0;
    if (stochastic) {
      if (g / kFp16SrTile != tile) {
        tile = g / kFp16SrTile;
        for (uint64_t k = 0; k < 16; ++k) {
          const Philox4x32 block = sr_block(key.seed, key.step, tile * 16 + k);
          for (uint64_t w = 0; w < 4; ++w) words[w * 16 + k] = block.v[w];
        }
      }
      r32 = words[g % kFp16SrTile];
    }
    dst[i] = fp8_e4m3_scaled_fast(src[i], down, up, stochastic, r32);
  }
}

}  // namespace unstuck::precision::cpu
