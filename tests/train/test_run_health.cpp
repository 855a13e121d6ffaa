// RunHealth (issue 31): each health signal warns once when it holds for the window and not before,
// and a run whose optimizer steps were mostly skipped is marked failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "train/run_health.h"

namespace unstuck::train {
namespace {

// A healthy step: a spread of rewards, entropy 1, a small KL, nothing skipped.
nlohmann::ordered_json line(int64_t step, int64_t skipped_total = 0) {
  return {{"step", step},        {"reward_mean", 0.4}, {"reward_std", 0.3},        {"zero_adv_frac", 0.2},
          {"entropy", 1.0},      {"kl_ref_k3", 0.01},  {"skipped_steps", skipped_total}};
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

}  // namespace
}  // namespace unstuck::train
