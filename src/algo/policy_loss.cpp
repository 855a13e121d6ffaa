// Clipped policy-gradient loss (token or sequence ratios, dual clip), KL estimators and the three
// loss aggregations.
#include "unstuck/algo/policy_loss.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace unstuck::algo {

torch::Tensor kl_estimate(const torch::Tensor& logp, const torch::Tensor& ref_logp, KlEstimator e) {
  const torch::Tensor d = ref_logp - logp;
  switch (e) {
    case KlEstimator::k1:
      return -d;
    case KlEstimator::k2:
      return 0.5 * d * d;
    case KlEstimator::k3:
      return torch::exp(d) - d - 1.0;
  }
  return -d;
}

torch::Tensor sequence_kl(const torch::Tensor& logp, const torch::Tensor& ref_logp, const torch::Tensor& mask,
                          KlEstimator estimator) {
  return (kl_estimate(logp, ref_logp, estimator) * mask.to(logp.scalar_type())).sum(1);
}

torch::Tensor tis_weights(const torch::Tensor& proximal, const torch::Tensor& sampling, double cap) {
  if (!(cap > 0)) throw std::invalid_argument("tis_weights: cap must be > 0");
  torch::NoGradGuard no_grad;
  return torch::exp((proximal - sampling).clamp(-kMaxLogRatio, kMaxLogRatio)).clamp_max(cap);
}

PolicyLoss policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& advantages,
                       const torch::Tensor& mask_in, const torch::Tensor& ref_logp, const torch::Tensor& entropy,
                       const PolicyLossOptions& o, const torch::Tensor& pg_weight) {
  const torch::Tensor mask = mask_in.to(logp.scalar_type());
  const torch::Tensor adv = advantages.to(logp.scalar_type()).unsqueeze(1);        // (B, 1)
  torch::Tensor log_ratio = (logp - old_logp).clamp(-kMaxLogRatio, kMaxLogRatio);  // (B, T)
  if (o.importance == ImportanceRatio::sequence)  // (B, 1): the row's mean over its completion tokens
    log_ratio = ((log_ratio * mask).sum(1, /*keepdim=*/true) / mask.sum(1, true).clamp_min(1.0))
                    .clamp(-kMaxLogRatio, kMaxLogRatio);
  const torch::Tensor ratio = torch::exp(log_ratio).expand_as(logp);  // (B, T)
  const torch::Tensor surr1 = ratio * adv;
  const torch::Tensor surr2 = torch::clamp(ratio, 1.0 - o.clip_low, 1.0 + o.clip_high) * adv;
  torch::Tensor per_token = -torch::min(surr1, surr2);
  const bool dual = o.clip_ratio_c > 0;
  if (dual) per_token = torch::where(adv < 0, torch::min(per_token, -adv * o.clip_ratio_c), per_token);
  if (pg_weight.defined()) per_token = per_token * pg_weight.to(per_token.scalar_type());  // verl: after the dual clip
  PolicyLoss out;
  const double n_tokens = std::max(mask.sum().item<double>(), 1.0);
  {
    torch::NoGradGuard no_grad;
    const auto frac = [&](const torch::Tensor& hit) {
      return (hit.to(mask.scalar_type()) * mask).sum().item<double>() / n_tokens;
    };
    out.clip_frac = frac(surr2 < surr1);
    out.clip_frac_low = frac((adv < 0) & (ratio < 1.0 - o.clip_low));
    out.clip_frac_high = frac((adv > 0) & (ratio > 1.0 + o.clip_high));
    if (dual) out.dual_clip_frac = frac((adv < 0) & (ratio > o.clip_ratio_c));
    out.ratio_mean = (ratio * mask).sum().item<double>() / n_tokens;
  }
  if (o.kl_coef != 0.0 || ref_logp.defined()) {
    if (!ref_logp.defined()) throw std::invalid_argument("policy_loss: kl_coef > 0 needs ref_logp");
    const torch::Tensor kl = kl_estimate(logp, ref_logp, o.kl_estimator);
    out.kl = (kl.detach() * mask).sum().item<double>() / n_tokens;
    if (o.kl_coef != 0.0) per_token = per_token + o.kl_coef * kl;
  }
  if (o.entropy_coef != 0.0 || entropy.defined()) {
    if (!entropy.defined()) throw std::invalid_argument("policy_loss: entropy_coef > 0 needs entropy");
    out.entropy = (entropy.detach() * mask).sum().item<double>() / n_tokens;
    if (o.entropy_coef != 0.0) per_token = per_token - o.entropy_coef * entropy;
  }
  const torch::Tensor masked = per_token * mask;
  switch (o.aggregation) {
    case LossAggregation::token_mean:
      out.loss = masked.sum() / (o.normalizer > 0 ? o.normalizer : n_tokens);
      break;
    case LossAggregation::seq_mean_token_mean: {
      const torch::Tensor per_seq = masked.sum(1) / mask.sum(1).clamp_min(1.0);
      out.loss = o.normalizer > 0 ? per_seq.sum() / o.normalizer : per_seq.mean();
      break;
    }
    case LossAggregation::seq_mean_token_sum_norm:
      if (o.max_new_tokens <= 0)
        throw std::invalid_argument("policy_loss: seq_mean_token_sum_norm needs max_new_tokens > 0");
      out.loss = masked.sum() / ((o.normalizer > 0 ? o.normalizer : double(logp.size(0))) * double(o.max_new_tokens));
      break;
  }
  return out;
}

}  // namespace unstuck::algo
