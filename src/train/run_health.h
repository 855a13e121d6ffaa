// Private: the health of a GRPO or SFT run read from its metrics lines, so a run that loses its
// learning says so instead of finishing silently. Each signal has a stated threshold (docs/GRPO.md, "Run
// health"); crossing one logs a warning once per episode, every run ends with a summary of them,
// and a run that skipped most of its optimizer steps ends with a non-zero exit (unstuck train: 3).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace unstuck::train {

struct HealthThresholds {
  int64_t window = 5;                 // consecutive steps a signal must hold (fewer in shorter runs)
  double entropy_floor = 0.01;        // nats per token: below this and ...
  double entropy_drop = 0.05;         // ... below this fraction of the first step's entropy: collapsed
  double kl_ceiling = 1.0;            // kl_ref_k3 (nats per token) above this: the policy left the reference
  double failed_skip_fraction = 0.5;  // more of the run's optimizer steps skipped than this: the run failed
  bool loss_must_fall = false;  // sft: the last window's mean `loss` not below the first window's warns at the end
};

class RunHealth {
 public:
  // `optimizer_steps_per_step`: grpo.minibatches x grpo.ppo_epochs; `steps`: the steps this run
  // makes (the window shrinks to half of them in short runs); `skipped_before`: the skipped_steps a
  // resumed checkpoint holds (its metrics count from the run's start).
  // `who` prefixes the messages ("train", "sft").
  RunHealth(int64_t optimizer_steps_per_step, int64_t steps, int64_t skipped_before = 0, HealthThresholds t = {},
            std::string who = "train");

  // Reads one step's metrics line (reward_mean, reward_std, zero_adv_frac, entropy, kl_ref_k3,
  // skipped_steps, grad_norm, logprob_mismatch, loss) and logs a warning for each signal that starts
  // to cross its threshold.
  void observe(const nlohmann::ordered_json& metrics);
  // The checks made on the whole run (loss_must_fall); call once after the last step.
  void end_of_run();

  // Every warning of the run, in order ("step 12: entropy collapsed ...").
  const std::vector<std::string>& warnings() const { return warnings_; }
  // True when more than failed_skip_fraction of the optimizer steps observed were skipped.
  bool failed() const;
  // "train: health over 30 step(s): 0 of 30 optimizer steps skipped; no warnings", or the warnings.
  std::string summary() const;
  nlohmann::json to_json() const;

 private:
  void warn(int64_t step, const std::string& signal, const std::string& text);

  int64_t per_step_, window_;
  HealthThresholds t_;
  std::string who_;
  int64_t last_step_ = 0;
  int64_t observed_ = 0, optimizer_steps_ = 0, skipped_ = 0;
  int64_t last_skipped_total_ = 0;  // skipped_steps of the previous line (cumulative over the run)
  int64_t skipped_run_ = 0, constant_run_ = 0, entropy_low_run_ = 0, kl_high_run_ = 0;
  double first_entropy_ = -1, first_reward_ = 0, constant_reward_ = 0;
  bool nonfinite_warned_ = false;
  std::vector<double> losses_;  // every finite `loss` observed (loss_must_fall)
  std::vector<std::string> warnings_;
  std::vector<std::string> signals_;  // the signal name of each warning
};

}  // namespace unstuck::train
