// StepProgress: rate-limited lines about the phase a long GRPO step is in.
#include "train/step_progress.h"

#include <spdlog/spdlog.h>

namespace unstuck::train {

void StepProgress::start_step(int64_t step) {
  check_memory();
  step_ = step;
  start_ = rollout_start_ = std::chrono::steady_clock::now();
  last_line_ = -1e9;
}

double StepProgress::since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool StepProgress::due() {
  const double t = since_start();
  if (t < quiet_s_ || t - last_line_ < every_s_) return false;
  last_line_ = t;
  return true;
}

void StepProgress::rollout(const rollout::GenerateProgress& p) {
  check_memory();
  if (p.tokens_done == 1) rollout_start_ = std::chrono::steady_clock::now();
  if (!due()) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - rollout_start_).count();
  spdlog::info("  step {}: rollout {}/{} tokens, {}/{} rows finished, {} tokens sampled ({:.0f} tokens/s), {:.0f} s in",
               step_, p.tokens_done, p.max_tokens, p.finished, p.rows, p.sampled, s > 0 ? double(p.sampled) / s : 0.0,
               since_start());
}

void StepProgress::chunk(const char* phase, int64_t chunk, int64_t chunks, int64_t pass, int64_t passes) {
  check_memory();
  if (!due()) return;
  spdlog::info("  step {}: {} chunk {}/{}{}, {:.0f} s in", step_, phase, chunk, chunks,
               passes > 1 ? fmt::format(" of optimizer pass {}/{}", pass, passes) : std::string(), since_start());
}

void StepProgress::optimizer(int64_t pass, int64_t passes) {
  check_memory();
  if (!due()) return;
  spdlog::info("  step {}: optimizer step{}, {:.0f} s in", step_,
               passes > 1 ? fmt::format(" {}/{}", pass, passes) : std::string(), since_start());
}

}  // namespace unstuck::train
