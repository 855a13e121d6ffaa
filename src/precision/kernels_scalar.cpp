// Scalar CPU kernels: the reference path, one call of the round_math.h functions per element. Also
// used for the heads and tails of ranges that the SIMD paths do not cover with whole tiles.
#include "cpu_kernels.h"

namespace unstuck::precision::cpu {

void round_scalar(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key,
                  uint64_t index0) {
  for (std::size_t i = 0; i < n; ++i)
    store_element(dst, i, round_element(src[i], mode, key, index0 + i), mode);
}

uint64_t adamw_scalar(const AdamWRange& r, const AdamWScalars& s, RoundMode mode, SrKey key) {
  uint64_t changed = 0;
  for (std::size_t i = 0; i < r.n; ++i) {
    adamw_element(r.master[i], r.exp_avg[i], r.exp_avg_sq[i], r.grad[i], r.decay, s);
    changed += store_element(r.compute, i, round_element(r.master[i], mode, key, r.index0 + i), mode);
  }
  return changed;
}

}  // namespace unstuck::precision::cpu
