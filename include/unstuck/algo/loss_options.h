// Enumerations of the policy-loss options (aggregation, KL estimator), free of libtorch so the run
// config can hold them.
#pragma once

#include <array>
#include <utility>

namespace unstuck::algo {

enum class LossAggregation {
  token_mean,               // sum over all completion tokens / number of tokens (DAPO)
  seq_mean_token_mean,      // mean over sequences of each sequence's token mean (GRPO paper)
  seq_mean_token_sum_norm,  // sum over tokens / (sequences * max_new_tokens) (Dr. GRPO)
};
inline constexpr std::array<std::pair<LossAggregation, const char*>, 3> kLossAggregationNames{{
    {LossAggregation::token_mean, "token_mean"},
    {LossAggregation::seq_mean_token_mean, "seq_mean_token_mean"},
    {LossAggregation::seq_mean_token_sum_norm, "seq_mean_token_sum_norm"},
}};
constexpr const auto& enum_names(LossAggregation) { return kLossAggregationNames; }

// The importance ratio the clip acts on: per token (PPO, GRPO), or per sequence (GSPO: the
// geometric mean of the sequence's token ratios, exp of the mean log-ratio over its tokens).
enum class ImportanceRatio { token, sequence };
inline constexpr std::array<std::pair<ImportanceRatio, const char*>, 2> kImportanceRatioNames{{
    {ImportanceRatio::token, "token"},
    {ImportanceRatio::sequence, "sequence"},
}};
constexpr const auto& enum_names(ImportanceRatio) { return kImportanceRatioNames; }

// Per-token estimators of KL(policy || reference) from log-probs on the sampled tokens
// (Schulman, "Approximating KL divergence"): with d = ref_logp - logp,
//   k1 = -d,  k2 = d^2 / 2,  k3 = exp(d) - d - 1 (unbiased, always >= 0).
enum class KlEstimator { k1, k2, k3 };
inline constexpr std::array<std::pair<KlEstimator, const char*>, 3> kKlEstimatorNames{{
    {KlEstimator::k1, "k1"},
    {KlEstimator::k2, "k2"},
    {KlEstimator::k3, "k3"},
}};
constexpr const auto& enum_names(KlEstimator) { return kKlEstimatorNames; }

// Where the KL penalty to the reference acts: a term of the loss (GRPO, verl's use_kl_loss), or
// subtracted from each completion's reward before the advantages (PPO's and verl's / OpenRLHF's
// use_kl_in_reward): r - kl_coef * sum over its tokens of the estimator.
enum class KlIn { loss, reward };
inline constexpr std::array<std::pair<KlIn, const char*>, 2> kKlInNames{{
    {KlIn::loss, "loss"},
    {KlIn::reward, "reward"},
}};
constexpr const auto& enum_names(KlIn) { return kKlInNames; }

}  // namespace unstuck::algo
