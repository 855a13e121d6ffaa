// PeakCheck::after(): the high-water against the planned peaks of the phases run so far.
#include "train/peak_check.h"

#include <algorithm>

#include <fmt/format.h>

namespace unstuck::train {

std::optional<std::string> PeakCheck::after(const std::string& phase, double measured, int64_t step) {
  const bool planned = std::find(phases_.begin(), phases_.end(), phase) != phases_.end();
  if (planned) planned_so_far_ = std::max(planned_so_far_, plan_.phase_peak(phase) - plan_.other_process_bytes());
  if (warned_ || planned_so_far_ <= 0) return std::nullopt;
  const double limit = planned_so_far_ * kPeakRatio + allowance_;
  if (measured <= limit) return std::nullopt;
  warned_ = true;
  return fmt::format(
      "train: measured peak memory {} after the {} phase of step {} is above the plan ({} for the "
      "phases run so far) by more than {:.0f}% plus {} of allocator slack; the plan missed "
      "something in {}: please report it with the run's run.json",
      format_bytes(measured), phase, step, format_bytes(planned_so_far_), (kPeakRatio - 1) * 100,
      format_bytes(allowance_), phase);
}

}  // namespace unstuck::train
