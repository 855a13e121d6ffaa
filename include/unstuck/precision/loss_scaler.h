// Loss scaling for the FP16 modes, in the shape of Megatron-LM's grad scaler: the loss is multiplied
// by scale() before backward, gradients by 1/scale() inside the fused AdamW, and update(found_inf)
// after every step skips overflowing steps and adapts the scale. Constant and dynamic versions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "unstuck/precision/precision_config.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision {

// Everything a checkpoint needs to resume the scaler bit-exactly.
struct LossScalerState {
  double scale = 1.0;
  int64_t growth_tracker = 0;      // clean steps since the last growth or overflow
  int64_t hysteresis_tracker = 0;  // overflows left before the next backoff
  int64_t skipped_steps = 0;       // steps skipped because of Inf/NaN gradients, in total
};

class LossScaler {
 public:
  virtual ~LossScaler() = default;
  // Current loss multiplier.
  double scale() const { return state_.scale; }
  double inv_scale() const { return 1.0 / state_.scale; }
  int64_t skipped_steps() const { return state_.skipped_steps; }
  // Records the outcome of a step: found_inf means its gradients overflowed and it was skipped.
  virtual void update(bool found_inf) = 0;
  const LossScalerState& state() const { return state_; }
  // Throws UserError when the state is impossible (non-positive scale, negative counters).
  void load_state(const LossScalerState& state);

 protected:
  LossScalerState state_;
};

// A fixed scale (1 = no scaling); overflowing steps are still counted as skipped.
class ConstantLossScaler final : public LossScaler {
 public:
  explicit ConstantLossScaler(double scale = 1.0);
  void update(bool found_inf) override;
};

// Backs off after `hysteresis` overflowing steps, grows after `growth_interval` clean steps.
// Example (hysteresis 2, backoff 0.5, growth_interval 2, scale 8): inf -> 8, inf -> 4, clean -> 4,
// clean -> 8 (and the hysteresis budget is refilled to 2).
class DynamicLossScaler final : public LossScaler {
 public:
  explicit DynamicLossScaler(const LossScaleConfig& options);
  void update(bool found_inf) override;
  const LossScaleConfig& options() const { return options_; }

 private:
  LossScaleConfig options_;
};

// True when any gradient element is NaN or Inf: the found-inf check of the FP16 modes.
bool found_nonfinite(const float* grad, std::size_t n, const KernelOptions& options = {});

}  // namespace unstuck::precision
