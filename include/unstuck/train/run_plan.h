// What a run decides before its first step, resolved once from the config, the model directory's
// config.json and the data, and checked, before any file is written or any weight is loaded: the
// device and threads, the compute dtype (with the probe's result), the data's counts and dropped
// records, the stop ids, the memory plan by component, the seeds. `train`, `sft`, `eval` and
// `unstuck config check` build the same plan; it is printed as one block at start, written to
// run.json ("plan"), and every later stage reads it instead of deciding again.
//
//   RunPlan plan = plan_run(config, {"train", resume}, comm);   // resolve + check; writes nothing
//   open_run(plan, rank);                                        // the run directory
//   ... load the weights the plan names, train ...
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "unstuck/config/device.h"
#include "unstuck/train/memory_plan.h"
#include "unstuck/config/run_config.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/precision/precision_config.h"
#include "unstuck/rollout/sampling_config.h"
#include "unstuck/train/prompt_fit.h"
#include "unstuck/train/run_setup.h"

namespace unstuck::dist {
class Communicator;
}

namespace unstuck::rollout {
class ToolRunner;
}
namespace unstuck::reward {
class Verifier;
}  // namespace unstuck::reward

namespace unstuck::train {

struct TrainerState;

// What is planned: the command and what it reads beyond the config.
struct RunRequest {
  std::string command;              // "train", "sft" or "eval"
  std::filesystem::path resume;     // train: --resume (a run directory or a checkpoint directory)
  std::filesystem::path model_dir;  // eval: --model
  std::string split = "test";       // eval: the split scored
  int64_t samples = 0;              // eval: records scored (0 = all)
  // train: start the run's reward workers in full and keep them in the plan for the trainer
  // (RunPlan::scorer); otherwise one probe worker proves the scorer can start and stops.
  bool keep_scorer = false;
};

// One SFT example, tokenized: BOS + prompt, and completion + EOS (the loss is on the completion).
struct SftExample {
  std::vector<int32_t> prompt;
  std::vector<int32_t> completion;
};

// What the run computes with, decided by the plan before step 1 and read by the trainers, never
// decided again: the dtypes of the compute and forward weights (libtorch's names, "Float",
// "BFloat16", "Half"), whether a frozen reference policy is kept and in which dtype, the rollout's
// decode mode on this device, and whether the policy is measured in a pass of its own.
struct RunDecisions {
  std::string compute_weights_dtype;
  std::string forward_dtype;
  std::string reference_dtype = "none";                       // train: none, or the reference's weights' dtype
  rollout::DecodeMode decode = rollout::DecodeMode::dynamic;  // train: rollout.decode resolved
  // train: the policy's log-probs measured before the update (several epochs or minibatches, or
  // LoRA dropout in the update's forwards), else by the update's own forward.
  bool measure_apart = false;
  std::string dist_backend;  // the communicator's ("single", "gloo", "nccl")
  bool keeps_reference() const { return reference_dtype != "none"; }
  nlohmann::json to_json() const;
};

struct RunPlan {
  RunPlan(std::string command, RunConfig config, RunContext ctx);

  std::string command;
  RunConfig config;                 // resolved: the model shape of config.json, the vocabulary, the tokenizer path
  RunContext ctx;                   // tokenizer, prompt formatter, seeds, stop ids; run_dir is where open_run writes
  std::filesystem::path model_dir;  // train: grpo.base_model; eval: --model; sft: none
  model::HfConfig hf;               // model_dir's config.json, read once (train, eval)
  double weight_file_bytes = 0;     // model_dir's *.safetensors
  ResolvedDevice device;            // this rank's
  int threads = 1;
  int rank = 0, world = 1;
  // precision.compute resolved (train, sft): native or fp32, with how (ComputeChoice::to_json).
  precision::ComputeMode compute = precision::ComputeMode::native;
  nlohmann::json compute_choice;
  RunDecisions decisions;  // train, sft: what the run computes with
  // train --resume: the checkpoint, its contents checked against this model and data.
  std::filesystem::path resume_checkpoint;
  std::shared_ptr<const TrainerState> resumed;
  // The data: the records kept and what was dropped, against max_prompt_tokens.
  int64_t max_prompt_tokens = 0;
  std::filesystem::path train_file, test_file;  // eval: test_file is the split scored
  PromptFit train, test;                        // eval: `test` only; sft: `test` (evaluation prompts)
  std::vector<SftExample> sft_examples;         // sft: the training set, tokenized
  std::filesystem::path sft_model_dir;          // sft: where the model is written
  MemoryPlan memory;
  MemoryLimit limit;
  // train with RunRequest::keep_scorer: the run's reward scorer when it runs workers (reward.function,
  // reward.command, or terms with them), started once here and handed to the trainer; else null.
  std::shared_ptr<reward::Verifier> scorer;
  // train and eval with tools.functions: the tool workers, started here (each tool's schema derived, so a
  // tool without one stops the run before anything is written) and handed to the trainer. The
  // prompts (ctx.prompts) render the tools, so the data is fitted to its real prompt lengths.
  std::shared_ptr<rollout::ToolRunner> tools;

  // {"command", "device", "threads", "compute", "data", "stop_token_ids", "seeds", "memory", ...}.
  nlohmann::json to_json() const;
  // The plan as one block of lines ("train: plan\n  model ...\n  device ...\n  memory ..."), each
  // part of the memory plan included.
  std::string describe() const;
};

// Resolves and checks a run of `request.command` for `config` (already loaded and validated) and
// writes nothing: every check that `train`, `sft` or `eval` run before their first step throws a
// UserError here, the memory plan against this rank's device included. `comm` (train) carries the
// compute probe of rank 0 to the other ranks; `clock`, when given, marks the stages.
RunPlan plan_run(RunConfig config, const RunRequest& request, dist::Communicator& comm, StartupClock* clock = nullptr);

// Creates the run directory of a plan (config.yaml, <command>.log, run.json with the plan) and logs
// the plan's block and its dropped records. Ranks other than 0 write nothing: they log warnings and
// errors to stderr, prefixed with their rank.
void open_run(RunPlan& plan);

}  // namespace unstuck::train
