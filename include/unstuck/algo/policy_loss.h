// The GRPO policy loss: PPO-style clipped importance ratio with separate low and high clip
// (clip-higher), per token or per sequence (GSPO), a dual clip for negative advantages, an optional
// KL penalty to the frozen reference policy (k1, k2 or k3 estimator) and an optional entropy bonus,
// aggregated over tokens in one of three ways. Pure: returns the loss and its metrics.
#pragma once

#include <torch/types.h>

#include "unstuck/algo/loss_options.h"

namespace unstuck::algo {

// logp, ref_logp: (B, T) -> per-token estimate (B, T).
torch::Tensor kl_estimate(const torch::Tensor& logp, const torch::Tensor& ref_logp, KlEstimator estimator);

// (B): each row's sum of the per-token estimate over its `mask`ed tokens, the KL penalty of
// grpo.kl_in: reward. Example: logp {-1, -2}, ref_logp {-1.5, -1}, mask {1, 1}: k1 -> -0.5,
// k2 -> 0.625, k3 -> (e^-0.5 - 0.5) + (e - 2) = 0.8248.
torch::Tensor sequence_kl(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& mask,
                          KlEstimator estimator);

// Truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly brings you
// off-policy RL training"; verl's tis_imp_ratio_cap): per token min(exp(proximal - sampling), cap),
// no gradient, where `proximal` are the trainer's own log-probs of the policy that sampled (before
// the update) and `sampling` the sampler's. It multiplies each token's policy-gradient loss,
// correcting for the sampler and the trainer computing different probabilities. The log-ratio is
// clamped to +-kMaxLogRatio first. Example: proximal {-1, -1}, sampling {-1.5, -3}, cap 2 ->
// {e^0.5 = 1.649, 2 (e^2 capped)}.
torch::Tensor tis_weights(const torch::Tensor& proximal, const torch::Tensor& sampling, double cap);

// |log ratio| is clamped to this before exp (as verl does), so a large mismatch between the
// sampling and the training log-probs gives a large finite ratio, never inf.
inline constexpr double kMaxLogRatio = 20.0;

struct PolicyLossOptions {
  double clip_low = 0.2;    // ratio lower bound 1 - clip_low
  double clip_high = 0.28;  // ratio upper bound 1 + clip_high (clip-higher)
  // Dual clip (Ye et al. 2020, verl's clip_ratio_c): for A < 0 the per-token loss is at most
  // -A * clip_ratio_c, so a ratio far above 1 cannot push a bad sample down without bound. 0 = off.
  double clip_ratio_c = 3.0;
  ImportanceRatio importance = ImportanceRatio::token;
  LossAggregation aggregation = LossAggregation::token_mean;
  int64_t max_new_tokens = 0;  // the normalizer of seq_mean_token_sum_norm
  double kl_coef = 0.0;        // weight of the KL penalty in the loss (0 = off)
  KlEstimator kl_estimator = KlEstimator::k3;
  double entropy_coef = 0.0;  // weight of the entropy bonus (0 = off)
  // > 0: divide by this instead of the batch's own count of tokens (token_mean) or sequences (the
  // seq_mean aggregations): a data-parallel rank passes the count of the whole minibatch, so the
  // gradients summed over ranks equal the single-process gradient.
  double normalizer = 0.0;
};

struct PolicyLoss {
  torch::Tensor loss;           // scalar, differentiable
  double clip_frac = 0.0;       // fraction of completion tokens whose ratio was clipped
  double clip_frac_low = 0.0;   // ... at 1 - clip_low (A < 0, ratio below it)
  double clip_frac_high = 0.0;  // ... at 1 + clip_high (A > 0, ratio above it)
  double dual_clip_frac = 0.0;  // ... by the dual clip (A < 0, ratio above clip_ratio_c)
  double kl = 0.0;              // mean per-token KL estimate (when ref_logp is given)
  double entropy = 0.0;         // mean per-token entropy (when given)
  double ratio_mean = 0.0;
};

// logp (B, T): log-probs of the sampled tokens under the policy being trained (differentiable);
// old_logp (B, T): at sampling time; advantages (B); mask (B, T) 1 on completion tokens;
// ref_logp (B, T) and entropy (B, T) may be undefined when their coefficients are 0; pg_weight
// (B, T), when given, multiplies each token's clipped policy-gradient term (not the KL or entropy
// terms): the truncated importance weights of tis_weights().
// Per token: L = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A), for A < 0 with the
// dual clip min(L, -A * clip_ratio_c); + kl_coef * KL - entropy_coef * entropy; then aggregated.
// ratio = exp(clamp(logp - old_logp, +-kMaxLogRatio)) per token, or per sequence (GSPO, as TRL's
// importance_sampling_level "sequence"): exp of the row's mean log-ratio over its completion
// tokens, the same value on each of its tokens, whose gradient reaches every token as
// ratio / tokens (the GSPO paper's sequence-level objective with seq_mean_token_mean).
// Examples (token_mean, one token): A = 1, ratio e^0.5 = 1.65, clip_high 0.28 -> loss -1.28, the
// token clipped; A = -1, ratio e^2 = 7.39 -> 7.39 without the dual clip, 3 with clip_ratio_c 3.
// GSPO, one row of two tokens with log-ratios 0.2 and 0.4, A = 1: ratio e^0.3 = 1.35 on both ->
// loss -1.28 (clip_high 0.28), or -1.35 with gradient -0.675 on each token (clip_high 0.5).
PolicyLoss policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& advantages,
                       const torch::Tensor& mask, const torch::Tensor& ref_logp, const torch::Tensor& entropy,
                       const PolicyLossOptions& options, const torch::Tensor& pg_weight = {});

}  // namespace unstuck::algo
