// Learning-rate schedules shared by SFT and GRPO: constant, linear warm-up, or warm-up then cosine
// decay to a floor. Pure function of the (1-based) optimizer step.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

namespace unstuck::config {

enum class LrSchedule { constant, warmup, cosine };
inline constexpr std::array<std::pair<LrSchedule, const char*>, 3> kLrScheduleNames{{
    {LrSchedule::constant, "constant"},
    {LrSchedule::warmup, "warmup"},
    {LrSchedule::cosine, "cosine"},
}};
constexpr const auto& enum_names(LrSchedule) { return kLrScheduleNames; }

// lr at optimizer `step` of `total`: linear warm-up over `warmup` steps (warmup, cosine), then for
// cosine 0.5 * (1 + cos(pi * progress)) scaled between min_ratio * lr and lr.
// Example: lr 1e-3, warmup 10, total 110, min_ratio 0.1: step 5 -> 5e-4, step 60 -> 5.5e-4,
// step 110 -> 1e-4.
inline double scheduled_lr(LrSchedule schedule, double lr, int64_t step, int64_t total, int64_t warmup,
                           double min_ratio) {
  if (schedule == LrSchedule::constant) return lr;
  if (step <= warmup) return lr * double(step) / double(std::max<int64_t>(1, warmup));
  if (schedule == LrSchedule::warmup) return lr;
  const double progress = double(step - warmup) / double(std::max<int64_t>(1, total - warmup));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  return lr * (min_ratio + (1.0 - min_ratio) * cosine);
}

// A run's learning-rate schedule over its optimizer steps: the same three keys in `grpo` and `sft`,
// each section with its own defaults (GRPO constant, SFT a 50-step warm-up then cosine to 0.1 x lr).
struct LrScheduleConfig {
  LrSchedule schedule = LrSchedule::constant;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;

  template <class V>
  void visit(V& v) {
    v("lr_schedule", schedule,
      "constant | warmup (linear over warmup_steps, then constant) | cosine (after the warm-up, down to "
      "min_lr_ratio x optim.lr at the last optimizer step)");
    v("warmup_steps", warmup_steps, "optimizer steps of linear learning-rate warm-up (warmup, cosine)");
    v("min_lr_ratio", min_lr_ratio, "where the cosine decay ends, as a fraction of optim.lr (cosine)");
  }

  // optim.lr as scheduled at the 1-based optimizer `step` of `total`.
  double lr_at(double lr, int64_t step, int64_t total) const {
    return scheduled_lr(schedule, lr, step, total, warmup_steps, min_lr_ratio);
  }
};

}  // namespace unstuck::config
