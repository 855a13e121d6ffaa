// RunHealth: each signal counts the consecutive steps it holds and warns once when the count
// reaches the window; a step where it no longer holds starts the count again.
#include "train/run_health.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace unstuck::train {
namespace {

std::optional<double> number(const nlohmann::ordered_json& m, const char* key) {
  const auto it = m.find(key);
  if (it == m.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

RunHealth::RunHealth(int64_t optimizer_steps_per_step, int64_t steps, int64_t skipped_before, HealthThresholds t,
                     std::string who)
    : per_step_(std::max<int64_t>(1, optimizer_steps_per_step)),
      window_(std::max<int64_t>(1, std::min(t.window, steps / 2))),
      t_(t),
      who_(std::move(who)),
      last_skipped_total_(skipped_before) {}

void RunHealth::warn(int64_t step, const std::string& signal, const std::string& text) {
  spdlog::warn("{}: step {}: {}", who_, step, text);
  warnings_.push_back(fmt::format("step {}: {}", step, text));
  signals_.push_back(signal);
}

void RunHealth::observe(const nlohmann::ordered_json& m) {
  ++observed_;
  const int64_t step = m.value("step", observed_);
  last_step_ = step;
  // Optimizer steps skipped (non-finite gradients): skipped_steps counts them over the run.
  const int64_t total = m.value("skipped_steps", last_skipped_total_);
  const int64_t skipped = std::clamp<int64_t>(total - last_skipped_total_, 0, per_step_);
  last_skipped_total_ = total;
  optimizer_steps_ += per_step_;
  skipped_ += skipped;
  skipped_run_ = skipped == per_step_ ? skipped_run_ + 1 : 0;
  if (skipped_run_ == window_)
    warn(step, "skipped",
         fmt::format("every optimizer step of the last {} step(s) was skipped (non-finite gradients), so the "
                     "weights have not changed; lower optim.lr or raise precision.loss_scale.min_scale",
                     window_));
  // Non-finite values where the policy's logits enter: the entropy and the log-probabilities.
  for (const char* key : {"entropy", "logprob_mismatch", "kl_ref_k3", "reward_mean", "loss"}) {
    const std::optional<double> x = number(m, key);
    if (!nonfinite_warned_ && x && !std::isfinite(*x)) {
      nonfinite_warned_ = true;
      warn(step, "nonfinite",
           fmt::format("{} is {}: the policy's logits are not finite (diverged weights); lower optim.lr", key, *x));
    }
  }
  if (const std::optional<double> loss = number(m, "loss"); t_.loss_must_fall && loss && std::isfinite(*loss))
    losses_.push_back(*loss);
  // Entropy collapse: far below the first step's, and near zero.
  if (const std::optional<double> e = number(m, "entropy"); e && std::isfinite(*e)) {
    if (first_entropy_ < 0) first_entropy_ = *e;
    entropy_low_run_ = *e < t_.entropy_floor && *e < t_.entropy_drop * first_entropy_ ? entropy_low_run_ + 1 : 0;
    if (entropy_low_run_ == window_)
      warn(step, "entropy",
           fmt::format("entropy {:.4g} nats per token for {} step(s), down from {:.4g} at the first step: the policy "
                       "has collapsed onto near-deterministic completions (lower optim.lr, or raise grpo.entropy_coef)",
                       *e, window_, first_entropy_));
  }
  // KL to the reference far beyond what RLVR runs reach.
  if (const std::optional<double> kl = number(m, "kl_ref_k3"); kl && std::isfinite(*kl)) {
    kl_high_run_ = *kl > t_.kl_ceiling ? kl_high_run_ + 1 : 0;
    if (kl_high_run_ == window_)
      warn(step, "kl",
           fmt::format("kl_ref_k3 {:.4g} nats per token for {} step(s), above {}: the policy has run away from "
                       "the reference (lower optim.lr, or raise grpo.kl_coef)",
                       *kl, window_, t_.kl_ceiling));
  }
  // The reward the same for every completion: no advantage, no gradient.
  const std::optional<double> reward = number(m, "reward_mean"), spread = number(m, "reward_std"),
                              zero_adv = number(m, "zero_adv_frac");
  if (reward && observed_ == 1) first_reward_ = *reward;
  const bool constant = reward && spread && zero_adv && *spread == 0 && *zero_adv >= 1;
  constant_run_ = !constant ? 0 : (constant_run_ > 0 && *reward == constant_reward_) ? constant_run_ + 1 : 1;
  if (constant) constant_reward_ = *reward;
  if (constant_run_ == window_)
    warn(step, "reward",
         fmt::format("every completion scored {:.4g} over the last {} step(s) (reward_std 0, zero_adv_frac 1): no "
                     "advantage is non-zero, so the policy gets no gradient{}",
                     *reward, window_,
                     *reward < first_reward_
                         ? fmt::format("; the reward collapsed from {:.4g} at the first step", first_reward_)
                         : std::string()));
}

void RunHealth::end_of_run() {
  if (!t_.loss_must_fall || losses_.size() < 2) return;
  // Means of the first and the last window of steps (half the steps each in a short run).
  const std::size_t n = std::min<std::size_t>(std::size_t(window_), losses_.size() / 2);
  double first = 0, last = 0;
  for (std::size_t i = 0; i < n; ++i) {
    first += losses_[i] / double(n);
    last += losses_[losses_.size() - n + i] / double(n);
  }
  if (last >= first)
    warn(last_step_, "loss",
         fmt::format("the loss did not fall: {:.4g} over the last {} step(s) against {:.4g} over the first {}; the "
                     "model has not learned (raise optim.lr if it stayed, lower it if it rose; check sft.warmup_steps)",
                     last, n, first, n));
}

bool RunHealth::failed() const {
  return optimizer_steps_ > 0 && double(skipped_) > t_.failed_skip_fraction * double(optimizer_steps_);
}

std::string RunHealth::summary() const {
  std::string out = fmt::format("{}: health over {} step(s): {} of {} optimizer steps skipped", who_, observed_,
                                skipped_, optimizer_steps_);
  if (warnings_.empty()) return out + "; no warnings";
  out += fmt::format("; {} warning(s):", warnings_.size());
  for (const std::string& w : warnings_) out += "\n  " + w;
  return out;
}

nlohmann::json RunHealth::to_json() const {
  return {{"steps", observed_},
          {"optimizer_steps", optimizer_steps_},
          {"skipped_optimizer_steps", skipped_},
          {"failed", failed()},
          {"warnings", warnings_},
          {"signals", signals_},
          {"window", window_}};
}

}  // namespace unstuck::train
