// Philox4x32-10 counter-based random numbers (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11). A pure function of (key, counter): no state, so any element's random bits can be
// recomputed anywhere (any thread, shard, rank or device) from the seed and its global position.
#pragma once

#include <cstdint>

#include "unstuck/common/hd.h"

namespace unstuck::precision {

struct Philox4x32 {
  uint32_t v[4];
};

namespace philox_detail {
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
}  // namespace philox_detail

// Ten rounds of Philox4x32 on `counter` under `key`.
// Example: philox4x32_10({0,0,0,0}, {0,0}) == {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}
// (the Random123 known-answer test).
UNSTUCK_HD Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  using namespace philox_detail;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0;
    const uint64_t p1 = uint64_t(kMul1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ key0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ key1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

}  // namespace unstuck::precision
