// The GRPO trainer (`unstuck train`): rollouts from the current compute weights, verifier rewards,
// group advantages, clipped policy-gradient updates through the fused precision kernels, and one
// line of metrics per rollout batch in <run dir>/metrics.jsonl.
#pragma once

#include <filesystem>

#include "unstuck/config/run_config.h"
#include "unstuck/dist/communicator.h"

namespace unstuck::train {

struct GrpoResult {
  std::filesystem::path run_dir;
  double first_reward_mean = 0.0;  // mean reward of the first rollout batch
  double last_reward_mean = 0.0;   // mean reward of the last rollout batch
  double final_eval_accuracy = 0.0;
  int64_t steps = 0;
  bool interrupted = false;  // stopped early by SIGINT/SIGTERM after checkpointing
  // Stopped by SIGINT/SIGTERM while step steps + 1 waited on reward workers: that step was dropped
  // and nothing was saved after the newest checkpoint.
  bool dropped_step = false;
  // Run health (docs/GRPO.md, "Run health"): the summary logged at the end, and whether the run
  // failed (most of its optimizer steps skipped; `unstuck train` then exits with code 3).
  std::string health_summary;
  bool health_failed = false;
};

// `resume`: empty for a fresh run; else a checkpoint directory (.../checkpoints/step_N) or a run
// directory (its newest checkpoint) to continue from, bit-exactly on CPU. `comm` (optional): the
// data-parallel ranks of the run (docs/DISTRIBUTED.md); each rolls out its share of the prompts,
// the optimizer state is sharded across them, rank 0 writes metrics, and each rank its shard of the
// checkpoints.
GrpoResult run_grpo(RunConfig config, const std::filesystem::path& resume = {}, dist::Communicator* comm = nullptr);

// For a process that ends with its run (`unstuck train`): after a failed run the SIGINT/SIGTERM stop
// handlers stay installed while the error travels up to be printed. A launcher stops the other ranks
// with SIGTERM as soon as one dies; with the default handler back, a survivor that had already left
// its run would die of that SIGTERM before printing why it failed. Off by default: an embedding
// process gets its previous handlers back after every run.
void keep_stop_signals_after_a_failed_run();

}  // namespace unstuck::train
