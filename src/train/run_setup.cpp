// Run start-up shared by the commands: tokenizer, run directory, logging, seeds, run.json.
#include "unstuck/train/run_setup.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/common/memory_usage.h"
#include "unstuck/common/parallel.h"
#include "unstuck/common/simd.h"
#include "unstuck/config/config.h"
#include "unstuck/config/preflight.h"
#include "unstuck/io/json_file.h"
#include "unstuck/log/logging.h"

namespace unstuck::train {
namespace {

// SplitMix64: a bijective mix, so distinct (seed, stream) pairs give unrelated stream seeds.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

StartupClock::StartupClock() { mark("launch"); }

void StartupClock::mark(const std::string& stage) {
  const double now = seconds_since_process_start();
  stages_.push_back({stage, now - last_, current_rss_bytes()});
  last_ = now;
}

double StartupClock::seconds() const { return last_; }

std::string StartupClock::summary() const {
  std::string out = fmt::format("{:.1f} s:", last_);
  for (std::size_t i = 0; i < stages_.size(); ++i)
    out += fmt::format("{} {} {:.1f} s", i ? "," : "", stages_[i].name, stages_[i].seconds);
  return out + fmt::format(" (resident {})", format_bytes(double(stages_.back().rss)));
}

nlohmann::json StartupClock::to_json() const {
  nlohmann::json stages = nlohmann::json::array();
  for (const Stage& s : stages_) stages.push_back({{"stage", s.name}, {"seconds", s.seconds}, {"rss_bytes", s.rss}});
  return {{"seconds", last_}, {"stages", stages}};
}

Seeds derive_seeds(uint64_t s) {
  return {mix(s * 4 + 1), mix(s * 4 + 2), mix(s * 4 + 3), mix(s * 4 + 4)};
}

std::filesystem::path tokenizer_file(const RunConfig& config) {
  if (!config.tokenizer.path.empty()) return config.tokenizer.path;
  return std::filesystem::path("data") / config::enum_name(config.data.task) / "tokenizer.model";
}

RunContext prepare_run(RunConfig& config, const std::string& command, bool model_from_checkpoint) {
  const std::filesystem::path tok_path = tokenizer_file(config);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tok_path);
  if (config.model.vocab_size == 0) config.model.vocab_size = tok.vocab_size();
  // Real checkpoints may pad the embedding beyond the tokenizer (Qwen2.5: 151936 rows for 151665
  // tokens); a tokenizer with ids the model has no row for cannot work, and a model trained here
  // gets exactly the tokenizer's vocabulary.
  if (config.model.vocab_size < tok.vocab_size() ||
      (!model_from_checkpoint && config.model.vocab_size != tok.vocab_size()))
    throw UserError("model.vocab_size is " + std::to_string(config.model.vocab_size) + " but the tokenizer " +
                    tok_path.string() + " has " + std::to_string(tok.vocab_size()) +
                    " pieces (set model.vocab_size: 0 to take it from the tokenizer)");
  validate(config);
  // chat_template: auto looks next to the tokenizer (its model directory).
  data::PromptFormatter prompts(config.data,
                                std::filesystem::is_directory(tok_path) ? tok_path : tok_path.parent_path());
  // The final model shape is known: limits and memory, before any allocation. `train` checks its
  // memory once the data gives the longest prompt (run_grpo), which sizes its rows.
  if (command == "train")
    check_limits(config);
  else
    preflight(config, command);
  at::set_num_threads(resolve_threads(config.precision.threads));
  return {{}, tok_path, std::move(tok), derive_seeds(config.run.seed), std::move(prompts), {}};
}

void open_run(RunContext& ctx, const RunConfig& config, const std::string& command, int rank) {
  if (rank > 0) {
    setup_logging(std::max(config.run.log_level, LogLevel::warn));
    spdlog::set_pattern("[rank " + std::to_string(rank) + "] %^%l%$: %v");
    ctx.run_dir = run_dir(config);
    return;
  }
  ctx.run_dir = prepare_run_dir(config);
  setup_logging(config.run.log_level, ctx.run_dir / (command + ".log"));
  io::write_json_file(ctx.run_dir / "run.json",
                      {{"command", command},
                       {"unstuck_version", UNSTUCK_VERSION},
                       {"libtorch_version", TORCH_VERSION},
                       {"seed", config.run.seed},
                       {"precision_mode", config::enum_name(config.precision.mode)},
                       {"precision_compute", config::enum_name(config.precision.compute)},
                       {"cpu_simd", simd_level_name(detect_simd_level())},
                       {"threads", resolve_threads(config.precision.threads)}});
  spdlog::info("{}: run directory {}; prompts from {}", command, ctx.run_dir.string(), ctx.prompts.describe());
}

void record_in_run_json(const RunContext& ctx, const nlohmann::json& fields) {
  nlohmann::json run = io::read_json_file(ctx.run_dir / "run.json");
  run.update(fields);
  io::write_json_file(ctx.run_dir / "run.json", run);
}

RunContext setup_run(RunConfig& config, const std::string& command, int rank) {
  RunContext ctx = prepare_run(config, command);
  open_run(ctx, config, command, rank);
  return ctx;
}

}  // namespace unstuck::train
