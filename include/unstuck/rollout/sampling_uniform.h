// Counter-based sampling uniforms: the uniform that draws token `position` of global row `row` at
// step `step` is a pure function of (seed, step, row, position) (Philox4x32-10), so a row samples the
// same tokens whatever batch, rank, world size or device it is generated on. Libtorch-free so device
// code and the scalar tests share it.
#pragma once

#include <cstdint>

#include "unstuck/common/hd.h"
#include "unstuck/precision/philox.h"

namespace unstuck::rollout {

// Key (seed low, seed high); counter (position / 4, row low, row high, step low): one Philox block
// serves four consecutive positions of a row, lane position % 4. The top 24 bits of the lane give a
// float in [0, 1) exactly (k * 2^-24, k < 2^24), so host and device agree bit for bit. Steps are
// taken modulo 2^32. Example: sampling_uniform(0, 0, 0, 0) == 0x6627e8 * 2^-24 (the Random123
// known-answer block {0x6627e8d5, ...}).
UNSTUCK_HD float sampling_uniform(uint64_t seed, uint64_t step, uint64_t row, uint64_t position) {
  const precision::Philox4x32 r = precision::philox4x32_10(
      precision::Philox4x32{{uint32_t(position >> 2), uint32_t(row), uint32_t(row >> 32), uint32_t(step)}},
      uint32_t(seed), uint32_t(seed >> 32));
  return float(r.v[position & 3u] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace unstuck::rollout
