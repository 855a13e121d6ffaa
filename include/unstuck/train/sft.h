// Supervised fine-tuning of the base policy from scratch (`unstuck sft`): teacher forcing on the
// task's solution strings with the loss on the completion only, greedy evaluation on the test
// split, and a model directory that `unstuck eval`, `unstuck generate` and GRPO load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "unstuck/config/run_config.h"

namespace unstuck::train {

struct SftResult {
  std::filesystem::path model_dir;  // where the model was written
  double accuracy = 0.0;            // final greedy test accuracy
  double seconds = 0.0;             // wall time of the whole run
  int64_t steps = 0;
  std::string
      health_summary;  // "sft: health over N step(s): ..." (skipped steps, non-finite loss, a loss that did not fall)
  bool health_failed = false;  // most optimizer steps skipped: `unstuck sft` exits 3
};

// Runs SFT as configured (run dir, log file, data, tokenizer, model, optimizer, precision).
SftResult run_sft(RunConfig config);

// The files of a model directory besides the weights.
inline constexpr const char* kTokenizerFile = "tokenizer.model";
inline constexpr const char* kRunConfigFile = "config.yaml";  // the run config that produced it

}  // namespace unstuck::train
