// Loss scalers: overflow skips the step and backs off after the hysteresis budget, growth after
// growth_interval clean steps, bounds, and a state that round-trips into an identical continuation.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/precision/loss_scaler.h"

namespace unstuck::precision {
namespace {

LossScaleConfig small_config() {
  LossScaleConfig c;
  c.initial_scale = 8;
  c.growth_factor = 2;
  c.backoff_factor = 0.5;
  c.growth_interval = 3;
  c.hysteresis = 2;
  c.min_scale = 1;
  c.max_scale = 64;
  return c;
}

TEST(LossScaler, OverflowSkipsAndBacksOffAfterHysteresis) {
  DynamicLossScaler s(small_config());
  EXPECT_EQ(s.scale(), 8);
  s.update(true);  // first overflow: budget 2 -> 1, scale kept
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.skipped_steps(), 1);
  s.update(true);  // budget spent: back off
  EXPECT_EQ(s.scale(), 4);
  s.update(true);  // until a growth refills the budget, every overflow backs off
  EXPECT_EQ(s.scale(), 2);
  EXPECT_EQ(s.skipped_steps(), 3);
  for (int i = 0; i < 5; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 1);  // min_scale
}

TEST(LossScaler, GrowsAfterCleanInterval) {
  DynamicLossScaler s(small_config());
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
  s.update(false);
  EXPECT_EQ(s.scale(), 16);
  s.update(true);  // an overflow resets the clean-step count
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 16);
  s.update(false);
  EXPECT_EQ(s.scale(), 32);
  for (int i = 0; i < 30; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 64);  // max_scale
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, StateRoundTripContinuesIdentically) {
  DynamicLossScaler a(small_config());
  const std::vector<bool> history = {false, true, false, false, true, true, false};
  for (bool inf : history) a.update(inf);
  DynamicLossScaler b(small_config());
  b.load_state(a.state());
  const std::vector<bool> more = {false, false, false, true, false, false, false, false};
  for (bool inf : more) {
    a.update(inf);
    b.update(inf);
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.state().growth_tracker, b.state().growth_tracker);
    EXPECT_EQ(a.state().hysteresis_tracker, b.state().hysteresis_tracker);
    EXPECT_EQ(a.skipped_steps(), b.skipped_steps());
  }
}

TEST(LossScaler, RejectsImpossibleStateAndOptions) {
  DynamicLossScaler s(small_config());
  LossScalerState bad;
  bad.scale = -1;
  EXPECT_THROW(s.load_state(bad), UserError);
  bad.scale = NAN;
  EXPECT_THROW(s.load_state(bad), UserError);
  LossScaleConfig c = small_config();
  c.backoff_factor = 1.5;
  EXPECT_THROW(DynamicLossScaler{c}, std::invalid_argument);
  c = small_config();
  c.hysteresis = 0;
  EXPECT_THROW(DynamicLossScaler{c}, std::invalid_argument);
}

TEST(LossScaler, ConstantScalerCountsSkips) {
  ConstantLossScaler s(4.0);
  s.update(true);
  s.update(false);
  EXPECT_EQ(s.scale(), 4.0);
  EXPECT_EQ(s.inv_scale(), 0.25);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, FoundNonfiniteSeesOneBadGradient) {
  std::vector<float> g(3'000'000, 1e-3f);
  EXPECT_FALSE(found_nonfinite(g.data(), g.size()));
  g[2'999'999] = INFINITY;
  EXPECT_TRUE(found_nonfinite(g.data(), g.size()));
  g[2'999'999] = NAN;
  EXPECT_TRUE(found_nonfinite(g.data(), g.size(), {2, SimdLevel::scalar}));
}

}  // namespace
}  // namespace unstuck::precision
