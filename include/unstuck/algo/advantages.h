// Group-relative advantages for GRPO: each prompt's G completions form a group, and a completion's
// advantage is its reward relative to its group. Pure functions, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace unstuck::algo {

enum class AdvantageMode {
  grpo,       // (r - mean) / (std + eps), std the sample standard deviation of the group
  mean_only,  // r - mean (Dr. GRPO: no division by the group's std)
};
inline constexpr std::array<std::pair<AdvantageMode, const char*>, 2> kAdvantageModeNames{{
    {AdvantageMode::grpo, "grpo"},
    {AdvantageMode::mean_only, "mean_only"},
}};
constexpr const auto& enum_names(AdvantageMode) { return kAdvantageModeNames; }

struct Advantages {
  std::vector<float> values;       // one per completion, in the order of the rewards
  int64_t zero_variance_groups = 0;  // groups whose rewards were all equal (advantage 0)
  int64_t groups = 0;
};

// rewards: G consecutive entries per group (rewards.size() a multiple of group_size >= 2).
// Example (grpo, eps 0): rewards {1, 0, 0, 1 | 1, 1, 1, 1}, G = 4 -> group 1: mean 0.5, sample std
// 0.577 -> {0.866, -0.866, -0.866, 0.866}; group 2 has zero variance -> {0, 0, 0, 0}, counted.
// Throws std::invalid_argument for a bad group size.
Advantages group_advantages(const std::vector<float>& rewards, int64_t group_size,
                            AdvantageMode mode, double eps = 1e-6);

}  // namespace unstuck::algo
