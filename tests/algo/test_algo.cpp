// GRPO algorithm pieces against hand-computed values: advantages (group-normalized, mean-only,
// RLOO, REINFORCE++, pass@k, the reward scales, zero-variance groups), DAPO's group filter and
// batch selection, the clipped loss in each clipping case, the dual clip, GSPO's sequence ratio,
// the three aggregations, the KL estimators and the KL in the reward, truncated importance
// sampling, the entropy bonus and the gradient of clipped vs unclipped tokens.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <tuple>

#include "unstuck/algo/advantages.h"
#include "unstuck/algo/dynamic_sampling.h"
#include "unstuck/algo/policy_loss.h"
#include "unstuck/algo/reward_shaping.h"

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

// The examples of advantages.h, by hand: rewards {1, 0, 0, 1 | 1, 1, 1, 1}, G = 4.
TEST(Advantages, RlooAndReinforcePpBaselines) {
  const std::vector<float> r{1, 0, 0, 1, 1, 1, 1, 1};
  // RLOO: 1 - mean(0, 0, 1) = 2/3 and 0 - mean(1, 0, 1) = -2/3; the flat group is 0, counted.
  Advantages a = group_advantages(r, 4, AdvantageMode::rloo);
  std::vector<float> want{2 / 3.f, -2 / 3.f, -2 / 3.f, 2 / 3.f, 0, 0, 0, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a.values[i], want[i], 1e-6) << i;
  EXPECT_EQ(a.zero_variance_groups, 1);
  // REINFORCE++: batch mean 6/8 = 0.75, sample std sqrt((6 - 36/8) / 7) = 0.46291; the flat group
  // keeps its non-zero advantage (its reward is above the batch's mean).
  a = group_advantages(r, 4, AdvantageMode::reinforce_pp, 0.0);
  const float hi = float(0.25 / 0.4629100498862757), lo = float(-0.75 / 0.4629100498862757);
  want = {hi, lo, lo, hi, hi, hi, hi, hi};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a.values[i], want[i], 1e-5) << i;
  EXPECT_EQ(a.zero_variance_groups, 1);
  // The batch moments of all ranks decide, not this rank's rewards alone: with a batch of mean 0.5
  // and std 1, the first group is r - 0.5.
  const RewardMoments whole{4, 2, 2 + 3 * 1.0};  // n 4, sum 2, sumsq 5: sample std sqrt((5 - 1) / 3)
  a = group_advantages({1, 0}, 2, AdvantageMode::reinforce_pp, 0.0, RewardScale::none, &whole);
  EXPECT_NEAR(a.values[0], 0.5, 1e-6);
  EXPECT_NEAR(a.values[1], -0.5, 1e-6);
  EXPECT_NEAR(whole.sample_std(), std::sqrt(4.0 / 3.0), 1e-12);
}

// TRL 1.16's None (a completion no reward function applied to, NaN here): left out of its group's
// mean, std, count and best, and of the batch moments; its advantage is 0 in every mode. The header's
// example: {1, NaN, 0, 0} -> the group {1, 0, 0}, mean 1/3, sample std sqrt(1/3).
TEST(Advantages, ACompletionNoScorerAppliedToIsLeftOut) {
  const float nan = std::nanf("");
  const double sd = std::sqrt(1.0 / 3.0);
  Advantages a = group_advantages({1, nan, 0, 0, nan, nan, nan, nan, 2, nan, nan, nan}, 4, AdvantageMode::grpo, 0.0);
  const std::vector<float> want{
      float(2 / 3.0 / sd), 0, float(-1 / 3.0 / sd), float(-1 / 3.0 / sd), 0, 0, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a.values[i], want[i], 1e-6) << i;
  EXPECT_NEAR(a.values[0], 1.155, 1e-3);
  EXPECT_EQ(a.zero_variance_groups, 2) << "a group with no scored completion, or one, has no signal";
  // RLOO: k = 3 scored -> 3/2 (r - mean); pass@k: the best among the scored.
  a = group_advantages({1, nan, 0, 0}, 4, AdvantageMode::rloo);
  EXPECT_NEAR(a.values[0], 1.0, 1e-6);
  EXPECT_NEAR(a.values[2], -0.5, 1e-6);
  EXPECT_EQ(a.values[1], 0.0f);
  a = group_advantages({nan, 0.5f, 0, 1, 0, 0, nan, 3}, 4, AdvantageMode::grpo_passk, 0.0, RewardScale::none);
  EXPECT_EQ(a.values, (std::vector<float>{0, 0, 0, 0.5f, 0, 0, 0, 3}));
  // REINFORCE++: the batch moments skip NaN, and the NaN row gets 0.
  const RewardMoments m = reward_moments({1, nan, 0, 1});
  EXPECT_EQ(m.n, 3);
  EXPECT_EQ(m.sum, 2);
  a = group_advantages({1, nan, 0, 1}, 2, AdvantageMode::reinforce_pp, 0.0, RewardScale::none);
  EXPECT_NEAR(a.values[0], 1 / 3.0, 1e-6);
  EXPECT_EQ(a.values[1], 0.0f);
  for (const float v : a.values) EXPECT_FALSE(std::isnan(v));
  // DAPO's filter: a group varies only among its scored rewards.
  EXPECT_EQ(informative_groups({1, nan, 1, 1, nan, nan, nan, nan, 0, nan, 1, nan}, 4),
            (std::vector<bool>{false, false, true}));
}

// verl's grpo_passk: the best completion gets its margin over the next best, scaled by the group's
// sample std; the rest 0; equal maxima give no margin.
TEST(Advantages, PassAtKCreditsOnlyTheBest) {
  // {1, 0, 0.5, 0}: mean 0.375, sum of squared deviations 0.6875, sample std sqrt(0.6875 / 3).
  const std::vector<float> r{1, 0, 0.5f, 0, 1, 0, 0, 1};
  Advantages a = group_advantages(r, 4, AdvantageMode::grpo_passk, 0.0);
  const double std_g = std::sqrt(0.6875 / 3);
  const std::vector<float> want{float(0.5 / std_g), 0, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a.values[i], want[i], 1e-5) << i;
  EXPECT_NEAR(a.values[0], 1.0445, 1e-4);
  EXPECT_EQ(a.zero_variance_groups, 0);
  a = group_advantages(r, 4, AdvantageMode::grpo_passk, 0.0, RewardScale::none);
  EXPECT_NEAR(a.values[0], 0.5, 1e-6);
  // The best is the first of the maxima: {0, 2, 1, 2} credits index 1 with 2 - 2 = 0; {0, 3, 1, 2}: 3 - 2.
  a = group_advantages({0, 3, 1, 2}, 4, AdvantageMode::grpo_passk, 0.0, RewardScale::none);
  EXPECT_EQ(a.values, (std::vector<float>{0, 1, 0, 0}));
  EXPECT_EQ(resolved_scale(AdvantageMode::grpo_passk, RewardScale::auto_), RewardScale::group);
}

// DAPO's dynamic sampling: a group is informative when its rewards are not all equal; the batch
// takes the first informative groups in sampling order, and fills with the first flat ones.
TEST(DynamicSampling, FilterAndSelection) {
  EXPECT_EQ(informative_groups({1, 0, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f}, 4), (std::vector<bool>{true, false}));
  EXPECT_EQ(informative_groups({0, 0, 0, 1e-7f}, 2), (std::vector<bool>{false, true}));
  EXPECT_THROW(informative_groups({1, 2, 3}, 2), std::invalid_argument);
  EXPECT_THROW(informative_groups({1, 2}, 1), std::invalid_argument);
  const std::vector<bool> flags{false, true, false, true, true};
  GroupSelection s = select_groups(flags, 2);
  EXPECT_EQ(s.groups, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(s.filled, 0);
  s = select_groups(flags, 4);
  EXPECT_EQ(s.groups, (std::vector<int64_t>{1, 3, 4, 0}));
  EXPECT_EQ(s.filled, 1);
  s = select_groups(flags, 7);  // fewer candidates than wanted: all of them
  EXPECT_EQ(s.groups, (std::vector<int64_t>{1, 3, 4, 0, 2}));
  EXPECT_EQ(s.filled, 2);
}

// scale_rewards as TRL's: group (grpo's own), batch, none.
TEST(Advantages, RewardScales) {
  const std::vector<float> r{1, 0, 0, 1, 1, 1, 1, 1};
  Advantages a = group_advantages(r, 4, AdvantageMode::grpo, 0.0, RewardScale::none);
  EXPECT_NEAR(a.values[0], 0.5, 1e-6);  // the same as mean_only
  a = group_advantages(r, 4, AdvantageMode::grpo, 0.0, RewardScale::batch);
  EXPECT_NEAR(a.values[0], 0.5 / 0.4629100498862757, 1e-5);  // (r - group mean) / batch std
  EXPECT_NEAR(a.values[4], 0.0, 1e-6);
  EXPECT_EQ(resolved_scale(AdvantageMode::grpo, RewardScale::auto_), RewardScale::group);
  EXPECT_EQ(resolved_scale(AdvantageMode::rloo, RewardScale::auto_), RewardScale::none);
  EXPECT_EQ(resolved_scale(AdvantageMode::reinforce_pp, RewardScale::auto_), RewardScale::batch);
  EXPECT_THROW(group_advantages(r, 4, AdvantageMode::mean_only, 0.0, RewardScale::group), std::invalid_argument);
}

// DAPO's soft overlong punishment, L_max 16 and L_cache 4: free up to 12 tokens, then -1/4 per token.
TEST(RewardShaping, SoftOverlongPenalty) {
  EXPECT_EQ(overlong_penalty(12, 16, 4), 0.0);
  EXPECT_EQ(overlong_penalty(13, 16, 4), -0.25);
  EXPECT_EQ(overlong_penalty(14, 16, 4), -0.5);
  EXPECT_EQ(overlong_penalty(16, 16, 4), -1.0);
  EXPECT_EQ(overlong_penalty(17, 16, 4), -1.0);
  EXPECT_EQ(overlong_penalty(1, 16, 16), -1.0 / 16);  // a ramp over the whole length
  EXPECT_THROW(overlong_penalty(5, 16, 0), std::invalid_argument);
  EXPECT_THROW(overlong_penalty(5, 16, 17), std::invalid_argument);
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

// A tool's result tokens (tools.functions) are context, never the policy's: the trainer gives them
// mask 0 (make_batch; ToolsRun checks loss_tokens_mean == response_len_mean end to end). Here, for
// every importance ratio, aggregation, the KL and entropy terms and TIS weights: perturbing every
// input at those positions (the log-probs, the sampler's, the reference's, the entropy, the TIS
// weights) leaves the loss and the gradient of every policy token bit for bit as they were, and their
// own gradient is exactly 0.
TEST(PolicyLoss, ToolTokensNeverEnterAnyVariant) {
  const int64_t B = 3, T = 12;
  torch::Tensor tool = torch::zeros({B, T}, torch::kBool);  // row 0: tokens 3-6 a tool's, row 1: 5-8
  tool[0].narrow(0, 3, 4).fill_(true);
  tool[1].narrow(0, 5, 4).fill_(true);
  torch::Tensor mask = (~tool).to(torch::kFloat);
  mask[2].narrow(0, 9, 3).zero_();  // row 2 ended early (padding)
  const torch::Tensor padding = mask.eq(0) & ~tool;
  const torch::Tensor adv = torch::tensor({1.0f, -0.7f, 0.4f});
  torch::manual_seed(7);
  const torch::Tensor lp = -torch::rand({B, T}) * 3, old = lp + torch::randn({B, T}) * 0.3,
                      ref = lp + torch::randn({B, T}) * 0.2, ent = torch::rand({B, T}) * 2;
  // The same inputs with the tool positions changed to other values.
  const auto perturbed = [&](const torch::Tensor& x, double scale) {
    return torch::where(tool, x + torch::randn({B, T}) * scale + scale, x);
  };
  const torch::Tensor lp2 = perturbed(lp, 1.5), old2 = perturbed(old, 2.0), ref2 = perturbed(ref, 1.0),
                      ent2 = perturbed(ent, 0.5);
  for (ImportanceRatio ratio : {ImportanceRatio::token, ImportanceRatio::sequence})
    for (LossAggregation agg :
         {LossAggregation::token_mean, LossAggregation::seq_mean_token_mean, LossAggregation::seq_mean_token_sum_norm})
      for (bool tis : {false, true}) {
        PolicyLossOptions o;
        o.importance = ratio;
        o.aggregation = agg;
        o.max_new_tokens = T;
        o.kl_coef = 0.1;
        o.entropy_coef = 0.01;
        const auto run = [&](const torch::Tensor& l, const torch::Tensor& s, const torch::Tensor& r,
                             const torch::Tensor& e) {
          torch::Tensor logp = l.clone().requires_grad_(true), entropy = e.clone().requires_grad_(true);
          const torch::Tensor w = tis ? tis_weights(l, s, 2.0) : torch::Tensor();
          const torch::Tensor loss = policy_loss(logp, s, adv, mask, r, entropy, o, w).loss;
          loss.backward();
          return std::make_tuple(loss.detach(), logp.grad(), entropy.grad());
        };
        const auto [loss, g_logp, g_ent] = run(lp, old, ref, ent);
        const auto [loss2, g_logp2, g_ent2] = run(lp2, old2, ref2, ent2);
        const std::string what = std::string(ratio == ImportanceRatio::token ? "token" : "sequence") + " agg " +
                                 std::to_string(int(agg)) + (tis ? " tis" : "");
        EXPECT_TRUE(torch::equal(loss, loss2)) << what << ": " << loss.item<double>() << " vs " << loss2.item<double>();
        EXPECT_TRUE(torch::equal(g_logp, g_logp2)) << what;
        EXPECT_TRUE(torch::equal(g_ent, g_ent2)) << what;
        EXPECT_EQ(g_logp.masked_select(tool).abs().max().item<float>(), 0.0f) << what;
        EXPECT_EQ(g_ent.masked_select(tool).abs().max().item<float>(), 0.0f) << what;
        EXPECT_GT(g_logp.masked_select(mask.to(torch::kBool)).abs().min().item<float>(), 0.0f) << what;
        EXPECT_EQ(g_logp.masked_select(padding).abs().max().item<float>(), 0.0f) << what;
      }
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

// Dual clip: A = -1 and ratio e^2 = 7.39: PPO's loss 7.39 is capped at -A x 3 = 3 (no gradient),
// counted; with clip_ratio_c 0 it stays 7.39. Low and high clips are counted apart.
TEST(PolicyLoss, DualClipAndClipKinds) {
  PolicyLossOptions off;
  off.clip_ratio_c = 0;
  EXPECT_NEAR(one_token(2.0, -1.0, off).loss.item<double>(), std::exp(2.0), 1e-5);
  PolicyLoss p = one_token(2.0, -1.0);
  EXPECT_NEAR(p.loss.item<double>(), 3.0, 1e-6);
  EXPECT_EQ(p.dual_clip_frac, 1.0);
  EXPECT_EQ(p.clip_frac_low, 0.0);
  torch::Tensor logp = torch::full({1, 1}, 2.0).set_requires_grad(true);
  policy_loss(logp, torch::zeros({1, 1}), torch::full({1}, -1.0), torch::ones({1, 1}), {}, {}, {}).loss.backward();
  EXPECT_EQ(logp.grad().item<double>(), 0.0);
  // A > 0 above 1 + clip_high: high; A < 0 below 1 - clip_low: low.
  EXPECT_EQ(one_token(0.5, 1.0).clip_frac_high, 1.0);
  EXPECT_EQ(one_token(std::log(0.5), -1.0).clip_frac_low, 1.0);
  EXPECT_EQ(one_token(std::log(0.5), -1.0).clip_frac_high, 0.0);
  // A log-ratio of 1000 (a sampling/training mismatch) is clamped to 20 before exp: finite.
  off.clip_high = 1e9;
  EXPECT_NEAR(one_token(1000.0, 1.0, off).loss.item<double>(), -std::exp(kMaxLogRatio), 1e-6 * std::exp(20.0));
}

// GSPO: one row of two tokens with log-ratios 0.2 and 0.4, A = 1. The sequence ratio is e^0.3 =
// 1.35 on both tokens: clipped at 1.28 (loss -1.28), or with clip_high 0.5 the loss -1.35 and each
// token's gradient -1.35 / 2 (d/dlogp_t of -exp(mean log-ratio)).
TEST(PolicyLoss, GspoSequenceRatio) {
  PolicyLossOptions o;
  o.importance = ImportanceRatio::sequence;
  o.aggregation = LossAggregation::seq_mean_token_mean;
  const torch::Tensor old = torch::zeros({1, 2});
  PolicyLoss p = policy_loss(torch::tensor({{0.2, 0.4}}), old, torch::ones({1}), torch::ones({1, 2}), {}, {}, o);
  EXPECT_NEAR(p.loss.item<double>(), -1.28, 1e-6);
  EXPECT_EQ(p.clip_frac, 1.0);
  o.clip_high = 0.5;
  torch::Tensor logp = torch::tensor({{0.2, 0.4}}).set_requires_grad(true);
  p = policy_loss(logp, old, torch::ones({1}), torch::ones({1, 2}), {}, {}, o);
  EXPECT_NEAR(p.loss.item<double>(), -std::exp(0.3), 1e-6);
  p.loss.backward();
  EXPECT_NEAR(logp.grad()[0][0].item<double>(), -std::exp(0.3) / 2, 1e-6);
  EXPECT_NEAR(logp.grad()[0][1].item<double>(), -std::exp(0.3) / 2, 1e-6);
  // Masked tokens take no part: a padded third position changes nothing.
  torch::Tensor padded = torch::tensor({{0.2, 0.4, 5.0}}).set_requires_grad(true);
  p = policy_loss(padded, torch::zeros({1, 3}), torch::ones({1}), torch::tensor({{1.0, 1.0, 0.0}}), {}, {}, o);
  EXPECT_NEAR(p.loss.item<double>(), -std::exp(0.3), 1e-6);
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

// grpo.kl_in: reward: each row's KL summed over its masked tokens.
TEST(PolicyLoss, SequenceKlForTheReward) {
  const torch::Tensor logp = torch::tensor({{-1.0f, -2.0f, -5.0f}});
  const torch::Tensor ref = torch::tensor({{-1.5f, -1.0f, 0.0f}});
  const torch::Tensor mask = torch::tensor({{1.0f, 1.0f, 0.0f}});  // the third token is padding
  EXPECT_NEAR(sequence_kl(logp, ref, mask, KlEstimator::k1).item<double>(), -0.5, 1e-6);
  EXPECT_NEAR(sequence_kl(logp, ref, mask, KlEstimator::k2).item<double>(), 0.625, 1e-6);
  EXPECT_NEAR(sequence_kl(logp, ref, mask, KlEstimator::k3).item<double>(), std::exp(-0.5) - 0.5 + std::exp(1.0) - 2,
              1e-6);
  EXPECT_NEAR(sequence_kl(logp, ref, mask, KlEstimator::k3).item<double>(), 0.8248, 1e-4);
  EXPECT_EQ(sequence_kl(logp, ref, mask, KlEstimator::k3).sizes(), (std::vector<int64_t>{1}));
}

// Truncated importance sampling: min(exp(proximal - sampling), cap), no gradient, multiplying the
// policy-gradient term only.
TEST(PolicyLoss, TruncatedImportanceWeights) {
  const torch::Tensor proximal = torch::tensor({{-1.0f, -1.0f}});
  const torch::Tensor sampling = torch::tensor({{-1.5f, -3.0f}});
  const torch::Tensor w = tis_weights(proximal, sampling, 2.0);
  EXPECT_NEAR(w[0][0].item<double>(), std::exp(0.5), 1e-6);
  EXPECT_EQ(w[0][1].item<double>(), 2.0);  // e^2 = 7.39, capped
  EXPECT_FALSE(w.requires_grad());
  EXPECT_THROW(tis_weights(proximal, sampling, 0.0), std::invalid_argument);
  // A huge mismatch stays finite (log-ratio clamped, then capped).
  EXPECT_EQ(tis_weights(torch::zeros({1, 1}), torch::full({1, 1}, -1e4), 2.0).item<double>(), 2.0);
  // A = 1, ratio 1 on both tokens: token_mean loss -(1.649 + 2) / 2, gradient -w / 2 per token.
  const torch::Tensor logp = proximal.clone().requires_grad_(true);
  PolicyLossOptions o;
  PolicyLoss p = policy_loss(logp, proximal, torch::ones({1}), torch::ones({1, 2}), {}, {}, o, w);
  EXPECT_NEAR(p.loss.item<double>(), -(std::exp(0.5) + 2) / 2, 1e-6);
  p.loss.backward();
  EXPECT_NEAR(logp.grad()[0][0].item<double>(), -std::exp(0.5) / 2, 1e-6);
  EXPECT_NEAR(logp.grad()[0][1].item<double>(), -1.0, 1e-6);
  // The KL term is not weighted: with A = 0 the loss is kl_coef x k3 whatever the weights.
  o.kl_coef = 0.1;
  const torch::Tensor ref = torch::full({1, 2}, -1.0f - float(std::log(2.0)));
  p = policy_loss(proximal, proximal, torch::zeros({1}), torch::ones({1, 2}), ref, {}, o, w);
  EXPECT_NEAR(p.loss.item<double>(), 0.1 * (0.5 + std::log(2.0) - 1.0), 1e-6);  // k3 at d = -ln 2
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
