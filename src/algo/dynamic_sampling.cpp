// DAPO's group filter and the batch selection (see dynamic_sampling.h for the worked examples).
#include "unstuck/algo/dynamic_sampling.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace unstuck::algo {

std::vector<bool> informative_groups(const std::vector<float>& rewards, int64_t group_size) {
  if (group_size < 2 || rewards.size() % std::size_t(group_size) != 0)
    throw std::invalid_argument("informative_groups: " + std::to_string(rewards.size()) +
                                " rewards do not split into groups of " + std::to_string(group_size) +
                                " (group size must be >= 2)");
  const std::size_t G = std::size_t(group_size);
  std::vector<bool> out;
  for (std::size_t g0 = 0; g0 < rewards.size(); g0 += G) {
    // Two different rewards among the scored ones (a NaN reward: no scorer applied to it).
    bool varies = false;
    std::size_t first = g0 + G;
    for (std::size_t i = g0; i < g0 + G; ++i) {
      if (std::isnan(rewards[i])) continue;
      if (first == g0 + G) first = i;
      varies = varies || rewards[i] != rewards[first];
    }
    out.push_back(varies);
  }
  return out;
}

GroupSelection select_groups(const std::vector<bool>& informative, int64_t wanted) {
  GroupSelection s;
  for (std::size_t i = 0; i < informative.size() && int64_t(s.groups.size()) < wanted; ++i)
    if (informative[i]) s.groups.push_back(int64_t(i));
  for (std::size_t i = 0; i < informative.size() && int64_t(s.groups.size()) < wanted; ++i)
    if (!informative[i]) {
      s.groups.push_back(int64_t(i));
      ++s.filled;
    }
  return s;
}

}  // namespace unstuck::algo
