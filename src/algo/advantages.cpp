// The advantage baselines and scales (see advantages.h for the worked examples).
#include "unstuck/algo/advantages.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace unstuck::algo {

RewardScale resolved_scale(AdvantageMode mode, RewardScale scale) {
  if (scale != RewardScale::auto_) return scale;
  switch (mode) {
    case AdvantageMode::grpo:
    case AdvantageMode::grpo_passk:
      return RewardScale::group;
    case AdvantageMode::reinforce_pp:
      return RewardScale::batch;
    case AdvantageMode::mean_only:
    case AdvantageMode::rloo:
      break;
  }
  return RewardScale::none;
}

double RewardMoments::sample_std() const {
  if (n < 2) return 0.0;
  return std::sqrt(std::max(0.0, (sumsq - sum * sum / n) / (n - 1)));
}

RewardMoments reward_moments(const std::vector<float>& rewards) {
  RewardMoments m;
  for (const float r : rewards) {
    if (std::isnan(r)) continue;  // a completion no scorer applied to
    m.n += 1;
    m.sum += r;
    m.sumsq += double(r) * double(r);
  }
  return m;
}

Advantages group_advantages(const std::vector<float>& rewards, int64_t group_size, AdvantageMode mode, double eps,
                            RewardScale scale_in, const RewardMoments* batch_in) {
  if (group_size < 2 || rewards.size() % std::size_t(group_size) != 0)
    throw std::invalid_argument("group_advantages: " + std::to_string(rewards.size()) +
                                " rewards do not split into groups of " + std::to_string(group_size) +
                                " (group size must be >= 2)");
  if (mode == AdvantageMode::mean_only && scale_in != RewardScale::auto_ && scale_in != RewardScale::none)
    throw std::invalid_argument("group_advantages: mean_only divides by nothing (it is grpo with scale none)");
  const RewardScale scale = resolved_scale(mode, scale_in);
  const RewardMoments batch = batch_in ? *batch_in : reward_moments(rewards);
  Advantages out;
  out.values.resize(rewards.size());
  const std::size_t G = std::size_t(group_size);
  for (std::size_t g0 = 0; g0 < rewards.size(); g0 += G) {
    // The group's scored completions: a NaN reward (no scorer applied, TRL's None) is left out of
    // the baseline and the scale, and its advantage is 0.
    const auto scored = [&](std::size_t i) { return !std::isnan(rewards[i]); };
    double k = 0, mean = 0;
    for (std::size_t i = g0; i < g0 + G; ++i)
      if (scored(i)) {
        mean += rewards[i];
        ++k;
      }
    mean = k > 0 ? mean / k : 0.0;
    double var = 0;
    for (std::size_t i = g0; i < g0 + G; ++i)
      if (scored(i)) var += (rewards[i] - mean) * (rewards[i] - mean);
    const double group_std = k > 1 ? std::sqrt(var / (k - 1)) : 0.0;  // sample std, as TRL and verl use
    const bool flat = var == 0.0;
    out.zero_variance_groups += flat;
    ++out.groups;
    const double divisor = scale == RewardScale::group   ? group_std + eps
                           : scale == RewardScale::batch ? batch.sample_std() + eps
                                                         : 1.0;
    // grpo_passk: the first best completion, and the margin over the next best.
    constexpr std::size_t kNone = std::size_t(-1);
    std::size_t best = kNone;
    for (std::size_t i = g0; i < g0 + G; ++i)
      if (scored(i) && (best == kNone || rewards[i] > rewards[best])) best = i;
    double second = -INFINITY;
    for (std::size_t i = g0; i < g0 + G; ++i)
      if (scored(i) && i != best) second = std::max(second, double(rewards[i]));
    for (std::size_t i = g0; i < g0 + G; ++i) {
      double centered = 0;
      switch (mode) {
        case AdvantageMode::grpo:
        case AdvantageMode::mean_only:
          centered = rewards[i] - mean;
          break;
        case AdvantageMode::rloo:
          centered = k > 1 ? k / (k - 1) * (rewards[i] - mean) : 0.0;
          break;
        case AdvantageMode::reinforce_pp:
          centered = rewards[i] - batch.mean();
          break;
        case AdvantageMode::grpo_passk:
          centered = i == best ? rewards[i] - second : 0.0;
          break;
      }
      // A flat group has no signal of its own: 0, not eps-divided rounding noise.
      const bool group_centered = mode != AdvantageMode::reinforce_pp;
      out.values[i] = !scored(i) || (group_centered && flat) ? 0.0f : float(centered / divisor);
    }
  }
  return out;
}

}  // namespace unstuck::algo
