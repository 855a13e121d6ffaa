// How data-parallel ranks split a GRPO rollout batch: whole prompts (so a group never straddles
// ranks), and every minibatch split across all ranks, so rank r's minibatch m is its piece of the
// single-process minibatch m and the summed gradients equal the single-process ones.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace unstuck::dist {

// Indices into the step's `prompts` prompts that `rank` rolls out, in order: for each of the
// `minibatches` contiguous minibatches, the rank's contiguous piece of it. At world size 1, all of
// them. Throws UserError naming grpo.prompts_per_step unless prompts % (world * minibatches) == 0
// (for world > 1).
// Example: 8 prompts, 2 minibatches, 2 ranks: rank 0 gets {0, 1, 4, 5}, rank 1 gets {2, 3, 6, 7}.
std::vector<int64_t> rank_prompts(int64_t prompts, int64_t minibatches, int world, int rank);

// The global rows (prompt p's completions are rows p * group_size ... p * group_size + group_size - 1)
// of rank_prompts(prompts, minibatches, world, rank), in the rank's order.
std::vector<int64_t> rank_rows(int64_t prompts, int64_t minibatches, int64_t group_size, int world, int rank);

// The [begin, end) share of `n` items that `rank` takes when they are split as evenly as possible.
std::pair<int64_t, int64_t> rank_range(int64_t n, int world, int rank);

}  // namespace unstuck::dist
