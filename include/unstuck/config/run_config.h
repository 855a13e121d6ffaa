// The run config: the tree of every component's options, loaded as defaults < YAML file <
// `key=value` overrides, validated in one place, and written back resolved into the run directory.
// To add a component: add its options struct as a member, one line in visit(), checks in
// validate().
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "unstuck/data/data_config.h"
#include "unstuck/dist/dist_config.h"
#include "unstuck/log/logging.h"
#include "unstuck/model/lora_config.h"
#include "unstuck/model/model_config.h"
#include "unstuck/precision/optim_config.h"
#include "unstuck/precision/precision_config.h"
#include "unstuck/reward/reward_config.h"
#include "unstuck/rollout/sampling_config.h"
#include "unstuck/rollout/tool_config.h"
#include "unstuck/tokenizer/tokenizer_config.h"
#include "unstuck/config/grpo_config.h"
#include "unstuck/config/sft_config.h"

namespace unstuck {

// Where a run computes: auto = the CUDA device of this rank (LOCAL_RANK) when one is usable, else
// the CPU (decided by resolve_device(), config/device.h).
enum class DeviceKind { auto_, cpu, cuda };
inline constexpr std::array<std::pair<DeviceKind, const char*>, 3> kDeviceKindNames{{
    {DeviceKind::auto_, "auto"},
    {DeviceKind::cpu, "cpu"},
    {DeviceKind::cuda, "cuda"},
}};
constexpr const auto& enum_names(DeviceKind) { return kDeviceKindNames; }

// Identity and bookkeeping of a run.
struct RunOptions {
  std::string name = "run";         // run directory is output_dir/name
  std::string output_dir = "runs";  // folder holding the run directories
  uint64_t seed = 1;                // root of every random stream (data, sampling, rounding)
  LogLevel log_level = LogLevel::info;
  DeviceKind device = DeviceKind::auto_;  // auto | cpu | cuda

  template <class V>
  void visit(V& v) {
    v("name", name, "name of the run; its directory is output_dir/name");
    v("output_dir", output_dir, "folder that holds the run directories");
    v("seed", seed, "run seed; the data, sampling and rounding streams are derived from it");
    v("log_level", log_level, "verbosity of the console and of the run's log file");
    v("device", device,
      "auto: this rank's CUDA device (LOCAL_RANK) when one is usable, else the CPU; cpu; cuda (an error "
      "without a usable device)");
  }
};

struct RunConfig {
  RunOptions run;
  precision::PrecisionConfig precision;
  precision::OptimConfig optim;
  model::ModelConfig model;
  model::LoraConfig lora;
  tokenizer::TokenizerConfig tokenizer;
  data::DataConfig data;
  reward::RewardConfig reward;
  rollout::SamplingConfig rollout;
  rollout::ToolsConfig tools;
  config::SftConfig sft;
  config::GrpoConfig grpo;
  dist::DistConfig dist;

  template <class V>
  void visit(V& v) {
    v("run", run, "name, output folder, seed and log level of the run");
    v("precision", precision, "compute-weight precision and loss scaling");
    v("optim", optim, "AdamW on the FP32 master weights");
    v("model", model, "Llama-style policy model (ignored when a model directory is loaded)");
    v("lora", lora, "LoRA adapters on a frozen base (rank 0: full-parameter training)");
    v("tokenizer", tokenizer, "SentencePiece tokenizer");
    v("data", data, "task, dataset files and prompt/completion templates");
    v("reward", reward, "verifier options: answer extraction and format credit");
    v("rollout", rollout, "sampling of completions (rollouts, evaluation, generate)");
    v("tools", tools,
      "Python tools the policy calls in its rollouts (multi-turn, as TRL's GRPOTrainer(tools=...)); docs/TOOLS.md");
    v("sft", sft, "supervised fine-tuning of the base policy");
    v("grpo", grpo, "GRPO reinforcement learning from verifiable rewards");
    v("dist", dist,
      "multi-process training: collective backend and peer timeout (ranks come from RANK, WORLD_SIZE, ...)");
  }
};

// Defaults, then the YAML file at `path` (skipped when empty), then each `a.b.c=value` override in
// order; then validate(). Throws UserError naming the file/override, line and dotted key.
RunConfig load_run_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});
// Checks value ranges and combinations; throws UserError naming the dotted key, e.g.
// "optim.lr must be > 0, got -1".
void validate(const RunConfig& config);
// The complete config as YAML with every key and its value (and its doc as a comment when
// `with_docs`); loading it gives the same config back.
std::string resolved_yaml(const RunConfig& config, bool with_docs = true);
// Every key with its type, default and doc (`markdown`: as a table).
std::string run_config_docs(bool markdown = false);

// output_dir/name.
std::filesystem::path run_dir(const RunConfig& config);
// Creates run_dir(config) and writes the resolved config to config.yaml in it; returns the folder.
std::filesystem::path prepare_run_dir(const RunConfig& config);

}  // namespace unstuck
