// Splitting a rollout batch across data-parallel ranks.
#include "unstuck/dist/data_parallel.h"

#include <string>

#include "unstuck/common/error.h"

namespace unstuck::dist {

std::vector<int64_t> rank_prompts(int64_t prompts, int64_t minibatches, int world, int rank) {
  std::vector<int64_t> out;
  if (world == 1) {
    for (int64_t p = 0; p < prompts; ++p) out.push_back(p);
    return out;
  }
  if (prompts % (int64_t(world) * minibatches) != 0)
    throw UserError("grpo.prompts_per_step (" + std::to_string(prompts) + ") must be a multiple of WORLD_SIZE x " +
                    "grpo.minibatches (" + std::to_string(world) + " x " + std::to_string(minibatches) +
                    ") so every rank gets whole prompt groups of every minibatch");
  const int64_t per_mb = prompts / minibatches, piece = per_mb / world;
  for (int64_t mb = 0; mb < minibatches; ++mb)
    for (int64_t i = 0; i < piece; ++i) out.push_back(mb * per_mb + rank * piece + i);
  return out;
}

std::vector<int64_t> rank_rows(int64_t prompts, int64_t minibatches, int64_t group_size, int world, int rank) {
  std::vector<int64_t> rows;
  for (int64_t p : rank_prompts(prompts, minibatches, world, rank))
    for (int64_t g = 0; g < group_size; ++g) rows.push_back(p * group_size + g);
  return rows;
}

std::pair<int64_t, int64_t> rank_range(int64_t n, int world, int rank) {
  return {n * rank / world, n * (rank + 1) / world};
}

}  // namespace unstuck::dist
