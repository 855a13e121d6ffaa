// The GRPO policy loss: PPO-style clipped importance ratio with separate low and high clip
// (clip-higher), an optional KL penalty to the frozen reference policy (k1, k2 or k3 estimator) and
// an optional entropy bonus, aggregated over tokens in one of three ways. Pure: returns the loss
// and its metrics.
#pragma once

#include <torch/types.h>

#include "unstuck/algo/loss_options.h"

namespace unstuck::algo {

// logp, ref_logp: (B, T) -> per-token estimate (B, T).
torch::Tensor kl_estimate(const torch::Tensor& logp, const torch::Tensor& ref_logp, KlEstimator estimator);

struct PolicyLossOptions {
  double clip_low = 0.2;      // ratio lower bound 1 - clip_low
  double clip_high = 0.28;    // ratio upper bound 1 + clip_high (clip-higher)
  LossAggregation aggregation = LossAggregation::token_mean;
  int64_t max_new_tokens = 0;  // the normalizer of seq_mean_token_sum_norm
  double kl_coef = 0.0;        // weight of the KL penalty in the loss (0 = off)
  KlEstimator kl_estimator = KlEstimator::k3;
  double entropy_coef = 0.0;   // weight of the entropy bonus (0 = off)
  // > 0: divide by this instead of the batch's own count of tokens (token_mean) or sequences (the
  // seq_mean aggregations): a data-parallel rank passes the count of the whole minibatch, so the
  // gradients summed over ranks equal the single-process gradient.
  double normalizer = 0.0;
};

struct PolicyLoss {
  torch::Tensor loss;      // scalar, differentiable
  double clip_frac = 0.0;  // fraction of completion tokens whose ratio was clipped
  double kl = 0.0;         // mean per-token KL estimate (when ref_logp is given)
  double entropy = 0.0;    // mean per-token entropy (when given)
  double ratio_mean = 0.0;
};

// logp (B, T): log-probs of the sampled tokens under the policy being trained (differentiable);
// old_logp (B, T): at sampling time; advantages (B); mask (B, T) 1 on completion tokens;
// ref_logp (B, T) and entropy (B, T) may be undefined when their coefficients are 0.
// Per token: -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)
//            + kl_coef * KL - entropy_coef * entropy, then aggregated.
// Example (token_mean, one token, A = 1, ratio e^0.5 = 1.65, clip_high 0.28): loss = -1.28, and
// the token counts as clipped.
PolicyLoss policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                       const torch::Tensor& advantages, const torch::Tensor& mask,
                       const torch::Tensor& ref_logp, const torch::Tensor& entropy,
                       const PolicyLossOptions& options);

}  // namespace unstuck::algo
