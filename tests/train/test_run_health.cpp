// RunHealth (issue 31): each health signal warns once when it holds for the window and not before,
// and a run whose optimizer steps were mostly skipped is marked failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "train/run_health.h"

namespace unstuck::train {
namespace {

// A healthy step: a spread of rewards, entropy 1, a small KL, nothing skipped.
nlohmann::ordered_json line(int64_t step, int64_t skipped_total = 0) {
  return {{"step", step},
          {"reward_mean", 0.4},
          {"reward_std", 0.3},
          {"zero_adv_frac", 0.2},
          {"entropy", 1.0},
          {"kl_ref_k3", 0.01},
          {"skipped_steps", skipped_total}};
}

bool has_signal(const RunHealth& h, const std::string& signal) {
  const nlohmann::json j = h.to_json();
  const auto& s = j["signals"];
  return std::find(s.begin(), s.end(), signal) != s.end();
}

TEST(RunHealth, HealthyRunHasNoWarnings) {
  RunHealth h(2, 20);
  for (int64_t s = 1; s <= 20; ++s) h.observe(line(s));
  EXPECT_TRUE(h.warnings().empty());
  EXPECT_FALSE(h.failed());
  EXPECT_EQ(h.summary(), "train: health over 20 step(s): 0 of 40 optimizer steps skipped; no warnings");
}

TEST(RunHealth, RewardCollapseWarnsAfterTheWindowOnly) {
  RunHealth h(1, 20);  // window 5
  h.observe(line(1));
  for (int64_t s = 2; s <= 5; ++s) {
    auto m = line(s);
    m["reward_mean"] = 0.0;
    m["reward_std"] = 0.0;
    m["zero_adv_frac"] = 1.0;
    h.observe(m);
  }
  EXPECT_TRUE(h.warnings().empty()) << "4 constant steps are fewer than the window of 5";
  auto m = line(6);
  m["reward_mean"] = 0.0;
  m["reward_std"] = 0.0;
  m["zero_adv_frac"] = 1.0;
  h.observe(m);
  h.observe(m);  // a seventh: still one warning for the episode
  ASSERT_EQ(h.warnings().size(), 1u);
  EXPECT_NE(h.warnings()[0].find("step 6: every completion scored 0 over the last 5 step(s)"), std::string::npos)
      << h.warnings()[0];
  EXPECT_NE(h.warnings()[0].find("collapsed from 0.4"), std::string::npos) << h.warnings()[0];
  EXPECT_FALSE(h.failed());
}

TEST(RunHealth, EntropyCollapseKlAndNonFiniteValues) {
  RunHealth h(1, 10);  // window 5
  h.observe(line(1));
  for (int64_t s = 2; s <= 6; ++s) {
    auto m = line(s);
    m["entropy"] = 0.005;  // < 0.01 and < 5% of the first step's 1.0
    m["kl_ref_k3"] = 3.0;  // > 1 nat per token
    h.observe(m);
  }
  EXPECT_TRUE(has_signal(h, "entropy"));
  EXPECT_TRUE(has_signal(h, "kl"));
  EXPECT_FALSE(has_signal(h, "nonfinite"));
  auto m = line(7);
  m["entropy"] = std::numeric_limits<double>::quiet_NaN();
  h.observe(m);
  EXPECT_TRUE(has_signal(h, "nonfinite"));
  // An entropy low in absolute terms but not against a low first step is no collapse.
  RunHealth low(1, 10);
  for (int64_t s = 1; s <= 10; ++s) {
    auto x = line(s);
    x["entropy"] = 0.008;
    low.observe(x);
  }
  EXPECT_FALSE(has_signal(low, "entropy"));
}

TEST(RunHealth, MostStepsSkippedFailsTheRun) {
  RunHealth h(2, 30, /*skipped_before=*/4);  // resumed: the checkpoint had 4 skipped already
  int64_t total = 4;
  for (int64_t s = 1; s <= 30; ++s) {
    total += s == 1 ? 0 : 2;  // every optimizer step after the first GRPO step skipped
    h.observe(line(s, total));
  }
  EXPECT_TRUE(h.failed());
  EXPECT_TRUE(has_signal(h, "skipped"));
  EXPECT_NE(h.summary().find("58 of 60 optimizer steps skipped"), std::string::npos) << h.summary();
  // Half skipped is not "most".
  RunHealth half(2, 10);
  for (int64_t s = 1; s <= 10; ++s) half.observe(line(s, s));
  EXPECT_FALSE(half.failed());
}

// SFT's health (unstuck sft): its loss, non-finite or not falling, named with the "sft" prefix.
TEST(RunHealth, SftWarnsWhenTheLossDoesNotFall) {
  HealthThresholds t;
  t.loss_must_fall = true;
  const auto sft_run = [&](const std::vector<double>& losses) {
    RunHealth h(1, int64_t(losses.size()), 0, t, "sft");
    for (std::size_t i = 0; i < losses.size(); ++i)
      h.observe({{"step", int64_t(i) + 1}, {"loss", losses[i]}, {"skipped_steps", 0}});
    h.end_of_run();
    return h;
  };
  // Falling: the last window (5 steps) below the first.
  std::vector<double> falling;
  for (int i = 0; i < 20; ++i) falling.push_back(3.0 * std::exp(-0.1 * i) + 0.05 * (i % 2));
  const RunHealth good = sft_run(falling);
  EXPECT_TRUE(good.warnings().empty()) << good.summary();
  EXPECT_EQ(good.summary(), "sft: health over 20 step(s): 0 of 20 optimizer steps skipped; no warnings");
  // Flat (a learning rate of 0) or rising (a diverging one): the loss did not fall, said once at the end.
  for (const std::vector<double>& losses :
       {std::vector<double>(12, 2.5), std::vector<double>{2, 2, 2.1, 2.3, 2.8, 3, 3.5, 4}}) {
    const RunHealth bad = sft_run(losses);
    ASSERT_EQ(bad.warnings().size(), 1u) << bad.summary();
    EXPECT_TRUE(has_signal(bad, "loss"));
    EXPECT_NE(bad.warnings()[0].find("the loss did not fall"), std::string::npos) << bad.warnings()[0];
    EXPECT_EQ(bad.warnings()[0].rfind("step " + std::to_string(losses.size()) + ":", 0), 0u) << bad.warnings()[0];
    EXPECT_FALSE(bad.failed());  // a warning, not a failure
  }
  // A non-finite loss is named.
  const RunHealth nan = sft_run({2.0, std::numeric_limits<double>::quiet_NaN(), 1.0, 0.5});
  EXPECT_TRUE(has_signal(nan, "nonfinite"));
  EXPECT_NE(nan.summary().find("loss is nan"), std::string::npos) << nan.summary();
  // GRPO's lines are not held to a falling loss (it has no such key, and the check is off).
  RunHealth grpo(1, 10);
  for (int64_t s = 1; s <= 10; ++s) {
    auto x = line(s);
    x["loss"] = 1.0;
    grpo.observe(x);
  }
  grpo.end_of_run();
  EXPECT_TRUE(grpo.warnings().empty());
}

}  // namespace
}  // namespace unstuck::train
