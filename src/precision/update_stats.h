// What one update did to the compute weights, measured over a bounded slice while its old values
// are still at hand (the optimizer saves a slice, updates it, then compares): how many elements
// changed their bits (sticking), and per block of the flat buffer the sums of (after - before)^2
// and before^2 (update_ratio). No full-size copy of the weights is ever made.
#pragma once

#include <cstddef>
#include <cstdint>

#include "unstuck/precision/rounding.h"

namespace unstuck::precision {

// Elements of [0, n) whose stored bits differ between `before` and `after` (compute weights of
// `mode`: uint16_t bits for bf16 / fp16, float for fp32). Bits, not values: -0 vs +0 and a NaN's
// payload count as changes, as a bit comparison of the buffers does.
uint64_t count_changed_bits(const void* before, const void* after, std::size_t n, RoundMode mode);

// Per block of `block` elements of [0, n) (the last one may be shorter): delta[k] += sum of
// (after - before)^2 and weight[k] += sum of before^2 over block k, the values widened to FP32
// exactly, their difference taken in FP32 and the squares summed in double in a fixed order (8
// lanes, then the lanes in order), so the result depends on the block's values only, not on the
// thread count or on how the caller slices the buffer. Example (fp32): before {1, 2}, after {1, 4},
// block 2 -> delta[0] += 4, weight[0] += 5.
void add_block_update_sums(const void* before, const void* after, std::size_t n, RoundMode mode, std::size_t block,
                           double* delta, double* weight, const KernelOptions& options = {});

}  // namespace unstuck::precision
