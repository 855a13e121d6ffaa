// Constant and dynamic loss scalers (see loss_scaler.h for the update rule).
#include "unstuck/precision/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "unstuck/common/error.h"

namespace unstuck::precision {

void LossScaler::load_state(const LossScalerState& s) {
  if (!(s.scale > 0) || !std::isfinite(s.scale))
    throw UserError("loss scaler state: scale must be finite and > 0, got " + std::to_string(s.scale));
  if (s.growth_tracker < 0 || s.skipped_steps < 0) throw UserError("loss scaler state: counters must be >= 0");
  state_ = s;
}

ConstantLossScaler::ConstantLossScaler(double scale) {
  if (!(scale > 0) || !std::isfinite(scale))
    throw std::invalid_argument("ConstantLossScaler: scale must be finite and > 0");
  state_.scale = scale;
}

void ConstantLossScaler::update(bool found_inf) {
  if (found_inf) ++state_.skipped_steps;
}

DynamicLossScaler::DynamicLossScaler(const LossScaleConfig& o) : options_(o) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("DynamicLossScaler: " + what); };
  if (!(o.initial_scale > 0) || !std::isfinite(o.initial_scale)) fail("initial_scale must be > 0");
  if (!(o.growth_factor > 1)) fail("growth_factor must be > 1");
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) fail("backoff_factor must be in (0, 1)");
  if (o.growth_interval < 1) fail("growth_interval must be >= 1");
  if (o.hysteresis < 1) fail("hysteresis must be >= 1");
  if (!(o.min_scale > 0) || o.min_scale > o.max_scale) fail("need 0 < min_scale <= max_scale");
  state_.scale = std::clamp(o.initial_scale, o.min_scale, o.max_scale);
  state_.hysteresis_tracker = o.hysteresis;
}

void DynamicLossScaler::update(bool found_inf) {
  if (found_inf) {
    ++state_.skipped_steps;
    state_.growth_tracker = 0;
    if (--state_.hysteresis_tracker <= 0) {
      state_.scale = std::max(state_.scale * options_.backoff_factor, options_.min_scale);
      state_.hysteresis_tracker = 0;  // further overflows back off at once until a growth
    }
    return;
  }
  if (++state_.growth_tracker == options_.growth_interval) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = options_.hysteresis;
    state_.scale = std::min(state_.scale * options_.growth_factor, options_.max_scale);
  }
}

bool found_nonfinite(const float* grad, std::size_t n, const KernelOptions& options) {
  return count_nonfinite(grad, n, options) > 0;
}

}  // namespace unstuck::precision
