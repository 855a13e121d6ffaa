// Advantages for GRPO-style training: each prompt's G completions form a group, and a completion's
// advantage is its reward less a baseline (its group's mean, the mean of the group's other
// completions, or the batch's mean), divided by a scale (the group's or the batch's standard
// deviation, or nothing). Pure functions, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace unstuck::algo {

enum class AdvantageMode {
  grpo,          // (r - mean_g) / (std_g + eps), std_g the sample standard deviation of the group
  mean_only,     // r - mean_g (Dr. GRPO: no division by the group's std)
  rloo,          // r - the mean of the group's other G - 1 rewards = G / (G - 1) (r - mean_g) (RLOO)
  reinforce_pp,  // (r - mean_b) / (std_b + eps) over the whole batch (REINFORCE++)
  // Pass@k training (verl's grpo_passk): only the group's best completion (the first of equal
  // maxima) is credited, with r_max - r_second / scale; every other completion gets 0.
  grpo_passk,
};
inline constexpr std::array<std::pair<AdvantageMode, const char*>, 5> kAdvantageModeNames{{
    {AdvantageMode::grpo, "grpo"},
    {AdvantageMode::mean_only, "mean_only"},
    {AdvantageMode::rloo, "rloo"},
    {AdvantageMode::reinforce_pp, "reinforce_pp"},
    {AdvantageMode::grpo_passk, "grpo_passk"},
}};
constexpr const auto& enum_names(AdvantageMode) { return kAdvantageModeNames; }

// What the centered reward is divided by (TRL's scale_rewards): auto = the mode's own (grpo and
// grpo_passk: group, reinforce_pp: batch, mean_only and rloo: none); group: the group's sample std + eps;
// batch: the whole batch's sample std + eps; none: nothing.
enum class RewardScale { auto_, group, batch, none };
inline constexpr std::array<std::pair<RewardScale, const char*>, 4> kRewardScaleNames{{
    {RewardScale::auto_, "auto"},
    {RewardScale::group, "group"},
    {RewardScale::batch, "batch"},
    {RewardScale::none, "none"},
}};
constexpr const auto& enum_names(RewardScale) { return kRewardScaleNames; }

// The scale `mode` uses when `scale` is auto, else `scale`.
RewardScale resolved_scale(AdvantageMode mode, RewardScale scale);

// Count, sum and sum of squares of a batch's rewards (NaN ones left out): what a data-parallel rank
// sums with the others' so batch statistics are those of the whole batch, whatever the world size.
struct RewardMoments {
  double n = 0, sum = 0, sumsq = 0;
  double mean() const { return n > 0 ? sum / n : 0.0; }
  double sample_std() const;  // 0 for fewer than 2 rewards
};
RewardMoments reward_moments(const std::vector<float>& rewards);

struct Advantages {
  std::vector<float> values;         // one per completion, in the order of the rewards
  int64_t zero_variance_groups = 0;  // groups whose rewards were all equal (advantage 0)
  int64_t groups = 0;
};

// rewards: G consecutive entries per group (rewards.size() a multiple of group_size >= 2); `batch`:
// the moments of the whole batch (all ranks) for reinforce_pp and the batch scale, or null for
// `rewards` alone. A group whose rewards are all equal is counted (zero_variance_groups); the
// group-centered modes give it 0. A NaN reward (no scorer applied to the completion: TRL's None) is
// left out of its group's mean, std, best and count (and of the batch moments), and gets 0, as
// TRL 1.16 does: {1, NaN, 0, 0}, G = 4 -> the group {1, 0, 0}: {1.155, 0, -0.577, -0.577}.
// Example (grpo, eps 0): rewards {1, 0, 0, 1 | 1, 1, 1, 1}, G = 4 -> group 1: mean 0.5, sample std
// 0.577 -> {0.866, -0.866, -0.866, 0.866}; group 2 has zero variance -> {0, 0, 0, 0}, counted.
// rloo: group 1 -> 1 - 1/3 = 0.667 and 0 - 2/3 = -0.667 -> {0.667, -0.667, -0.667, 0.667}.
// reinforce_pp: batch mean 0.75, sample std 0.463 -> {0.540, -1.620, -1.620, 0.540 | 0.540 x 4}.
// grpo_passk: {1, 0, 0.5, 0}: best 1, second 0.5, sample std 0.479 -> {1.044, 0, 0, 0} (scale
// none: {0.5, 0, 0, 0}); {1, 0, 0, 1}: two equal maxima -> {0, 0, 0, 0}.
// Throws std::invalid_argument for a bad group size, or mean_only with a scale other than none.
Advantages group_advantages(const std::vector<float>& rewards, int64_t group_size, AdvantageMode mode,
                            double eps = 1e-6, RewardScale scale = RewardScale::auto_,
                            const RewardMoments* batch = nullptr);

}  // namespace unstuck::algo
