// Group-normalized and mean-only advantages (see advantages.h for the worked example).
#include "unstuck/algo/advantages.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace unstuck::algo {

Advantages group_advantages(const std::vector<float>& rewards, int64_t group_size,
                            AdvantageMode mode, double eps) {
  if (group_size < 2 || rewards.size() % std::size_t(group_size) != 0)
    throw std::invalid_argument("group_advantages: " + std::to_string(rewards.size()) +
                                " rewards do not split into groups of " + std::to_string(group_size) +
                                " (group size must be >= 2)");
  Advantages out;
  out.values.resize(rewards.size());
  const std::size_t G = std::size_t(group_size);
  for (std::size_t g0 = 0; g0 < rewards.size(); g0 += G) {
    double mean = 0;
    for (std::size_t i = g0; i < g0 + G; ++i) mean += rewards[i];
    mean /= double(G);
    double var = 0;
    for (std::size_t i = g0; i < g0 + G; ++i) var += (rewards[i] - mean) * (rewards[i] - mean);
    const double std_dev = std::sqrt(var / double(G - 1));  // sample std, as TRL and verl use
    const bool flat = var == 0.0;
    out.zero_variance_groups += flat;
    ++out.groups;
    for (std::size_t i = g0; i < g0 + G; ++i) {
      const double centered = rewards[i] - mean;
      out.values[i] = flat ? 0.0f
                           : float(mode == AdvantageMode::grpo ? centered / (std_dev + eps) : centered);
    }
  }
  return out;
}

}  // namespace unstuck::algo
