// GRPO algorithm pieces against hand-computed values: group advantages (normalized and mean-only,
// zero-variance groups), the clipped loss in each clipping case, the three aggregations, the KL
// estimators, the entropy bonus and the gradient of clipped vs unclipped tokens.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "unstuck/algo/advantages.h"
#include "unstuck/algo/policy_loss.h"

namespace unstuck::algo {
namespace {

TEST(Advantages, GroupNormalizedWithZeroVarianceGroup) {
  const Advantages a = group_advantages({1, 0, 0, 1, 1, 1, 1, 1}, 4, AdvantageMode::grpo, 0.0);
  const float s = float(0.5 / std::sqrt(1.0 / 3.0));  // |r - mean| / sample std = 0.866
  const std::vector<float> want{s, -s, -s, s, 0, 0, 0, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a.values[i], want[i], 1e-6) << i;
  EXPECT_EQ(a.zero_variance_groups, 1);
  EXPECT_EQ(a.groups, 2);
}

TEST(Advantages, MeanOnlyIsDrGrpo) {
  const Advantages a = group_advantages({1, 0, 0.1f, 0.9f}, 2, AdvantageMode::mean_only);
  const std::vector<float> want{0.5f, -0.5f, -0.4f, 0.4f};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a.values[i], want[i], 1e-6) << i;
  EXPECT_EQ(a.zero_variance_groups, 0);
}

TEST(Advantages, RejectsBadGroups) {
  EXPECT_THROW(group_advantages({1, 2, 3}, 2, AdvantageMode::grpo), std::invalid_argument);
  EXPECT_THROW(group_advantages({1, 2}, 1, AdvantageMode::grpo), std::invalid_argument);
}

// One token: loss and clip status for log-ratio `lr` and advantage `a`.
PolicyLoss one_token(double lr, double a, const PolicyLossOptions& o = {}) {
  const torch::Tensor old = torch::zeros({1, 1});
  return policy_loss(torch::full({1, 1}, lr), old, torch::full({1}, a), torch::ones({1, 1}), {}, {}, o);
}

TEST(PolicyLoss, ClipHigherAndClipLowCases) {
  // A > 0, ratio e^0.5 = 1.649 above 1 + 0.28: clipped at 1.28.
  PolicyLoss p = one_token(0.5, 1.0);
  EXPECT_NEAR(p.loss.item<double>(), -1.28, 1e-6);
  EXPECT_EQ(p.clip_frac, 1.0);
  // A < 0, ratio 0.5 below 1 - 0.2: the pessimistic (clipped) term -0.8 wins, loss 0.8.
  p = one_token(std::log(0.5), -1.0);
  EXPECT_NEAR(p.loss.item<double>(), 0.8, 1e-6);
  EXPECT_EQ(p.clip_frac, 1.0);
  // A > 0, ratio 0.5: no clipping applies (min picks the unclipped 0.5), loss -0.5.
  p = one_token(std::log(0.5), 1.0);
  EXPECT_NEAR(p.loss.item<double>(), -0.5, 1e-6);
  EXPECT_EQ(p.clip_frac, 0.0);
  // Symmetric clipping with clip_high = clip_low = 0.2 clips at 1.2.
  PolicyLossOptions sym;
  sym.clip_high = 0.2;
  EXPECT_NEAR(one_token(0.5, 1.0, sym).loss.item<double>(), -1.2, 1e-6);
}

TEST(PolicyLoss, GradientFlowsOnlyThroughUnclippedTokens) {
  for (auto [lr, want_grad] : {std::pair{0.0, -1.0}, std::pair{0.5, 0.0}}) {
    torch::Tensor logp = torch::full({1, 1}, lr).set_requires_grad(true);
    policy_loss(logp, torch::zeros({1, 1}), torch::ones({1}), torch::ones({1, 1}), {}, {}, {}).loss.backward();
    EXPECT_NEAR(logp.grad().item<double>(), want_grad * std::exp(lr), 1e-6) << "log-ratio " << lr;
  }
}

TEST(PolicyLoss, Aggregations) {
  // Ratio 1 everywhere: per-token loss = -A. Sequence 1 has 2 tokens (A = 1), sequence 2 one (A = 2).
  const torch::Tensor logp = torch::zeros({2, 3});
  const torch::Tensor mask = torch::tensor({1.f, 1.f, 0.f, 1.f, 0.f, 0.f}).view({2, 3});
  const torch::Tensor adv = torch::tensor({1.f, 2.f});
  PolicyLossOptions o;
  o.aggregation = LossAggregation::token_mean;
  EXPECT_NEAR(policy_loss(logp, logp, adv, mask, {}, {}, o).loss.item<double>(), -4.0 / 3.0, 1e-6);
  o.aggregation = LossAggregation::seq_mean_token_mean;
  EXPECT_NEAR(policy_loss(logp, logp, adv, mask, {}, {}, o).loss.item<double>(), -1.5, 1e-6);
  o.aggregation = LossAggregation::seq_mean_token_sum_norm;
  o.max_new_tokens = 4;
  EXPECT_NEAR(policy_loss(logp, logp, adv, mask, {}, {}, o).loss.item<double>(), -0.5, 1e-6);
  o.max_new_tokens = 0;
  EXPECT_THROW(policy_loss(logp, logp, adv, mask, {}, {}, o), std::invalid_argument);
}

TEST(PolicyLoss, KlEstimatorsAndPenalty) {
  // Policy prob 0.5, reference 0.25 on the sampled token: d = ln(0.25 / 0.5) = -ln 2.
  const torch::Tensor logp = torch::full({1, 1}, std::log(0.5));
  const torch::Tensor ref = torch::full({1, 1}, std::log(0.25));
  const double ln2 = std::log(2.0);
  EXPECT_NEAR(kl_estimate(logp, ref, KlEstimator::k1).item<double>(), ln2, 1e-6);
  EXPECT_NEAR(kl_estimate(logp, ref, KlEstimator::k2).item<double>(), 0.5 * ln2 * ln2, 1e-6);
  EXPECT_NEAR(kl_estimate(logp, ref, KlEstimator::k3).item<double>(), 0.5 + ln2 - 1.0, 1e-6);
  // k3 is never negative, and zero when the policies agree.
  EXPECT_NEAR(kl_estimate(logp, logp, KlEstimator::k3).item<double>(), 0.0, 1e-7);
  // With A = 0 the loss is the KL penalty alone.
  PolicyLossOptions o;
  o.kl_coef = 0.1;
  const PolicyLoss p = policy_loss(logp, logp, torch::zeros({1}), torch::ones({1, 1}), ref, {}, o);
  EXPECT_NEAR(p.loss.item<double>(), 0.1 * (0.5 + ln2 - 1.0), 1e-6);
  EXPECT_NEAR(p.kl, 0.5 + ln2 - 1.0, 1e-6);
  o.kl_coef = 0.1;
  EXPECT_THROW(policy_loss(logp, logp, torch::zeros({1}), torch::ones({1, 1}), {}, {}, o), std::invalid_argument);
}

TEST(PolicyLoss, EntropyBonusLowersTheLoss) {
  PolicyLossOptions o;
  o.entropy_coef = 0.01;
  const torch::Tensor z = torch::zeros({1, 2});
  const PolicyLoss p = policy_loss(z, z, torch::ones({1}), torch::ones({1, 2}), {}, torch::full({1, 2}, 2.0), o);
  EXPECT_NEAR(p.loss.item<double>(), -1.0 - 0.02, 1e-6);
  EXPECT_NEAR(p.entropy, 2.0, 1e-6);
}

}  // namespace
}  // namespace unstuck::algo
