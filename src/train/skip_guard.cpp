// SkipGuard: a warning per skipped optimizer step, an error with a hint after too many in a row.
#include "train/skip_guard.h"

#include <spdlog/spdlog.h>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"

namespace unstuck::train {

void SkipGuard::record(int64_t step, bool skipped, double loss_scale, double lr) {
  if (!skipped) {
    in_a_row_ = 0;
    return;
  }
  ++in_a_row_;
  const int64_t limit = config_.precision.loss_scale.max_consecutive_skips;
  spdlog::warn("{}: step {}: optimizer step skipped, the gradients were not finite (loss scale {}, {} in a row)", who_,
               step, loss_scale, in_a_row_);
  if (limit <= 0 || in_a_row_ < limit) return;
  const bool fp16 = config_.precision.mode == precision::PrecisionMode::fp16 ||
                    config_.precision.mode == precision::PrecisionMode::fp16_sr;
  throw UserError(who_ + ": stopped at step " + std::to_string(step) + ": " + std::to_string(in_a_row_) +
                  " optimizer steps in a row were skipped because the gradients were not finite (loss scale " +
                  config::format_double(loss_scale) +
                  "), so the weights no longer change. The run has "
                  "diverged: lower optim.lr (" +
                  config::format_double(lr) + " now)" +
                  (fp16 ? ", or train in precision.mode=bf16_sr, whose range does not overflow" : "") +
                  "; precision.loss_scale.max_consecutive_skips sets this limit");
}

}  // namespace unstuck::train
