// What the commands share around a run's plan (run_plan.h): the start-up clock, the named random
// streams derived from the run seed, the context the stages read, and run.json updates.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "unstuck/config/run_config.h"
#include "unstuck/data/prompt_formatter.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::train {

// Where a run's start-up goes: each stage's seconds and the resident memory after it, from the
// process start (loading libtorch and static initialization are the first stage, "launch") to the
// first rollout token. Logged as one line and saved in run.json ("startup").
class StartupClock {
 public:
  StartupClock();                       // marks "launch": the time from the process start to now
  void mark(const std::string& stage);  // the time since the previous mark
  double seconds() const;               // since the process start
  // "12.3 s: launch 0.6, base model 3.1 (2.8 GiB), ..."
  std::string summary() const;
  nlohmann::json to_json() const;

 private:
  struct Stage {
    std::string name;
    double seconds = 0;
    int64_t rss = 0;
  };
  std::vector<Stage> stages_;
  double last_ = 0;
};

// Independent random streams derived from run.seed (DESIGN.md: randomness is named and keyed).
struct Seeds {
  uint64_t data = 0;      // order of training records
  uint64_t init = 0;      // weight initialization
  uint64_t sampling = 0;  // rollouts / evaluation samples
  uint64_t rounding = 0;  // stochastic rounding of the compute weights
  uint64_t dropout = 0;   // lora.dropout's masks
};
Seeds derive_seeds(uint64_t run_seed);

struct RunContext {
  std::filesystem::path run_dir;  // output_dir/name (created by open_run)
  std::filesystem::path tokenizer_path;
  tokenizer::Tokenizer tokenizer;
  Seeds seeds;
  data::PromptFormatter prompts;  // data.prompt_template / chat template (auto: the tokenizer's folder)
  std::vector<int32_t> stop_ids;  // tokens a completion ends at (train::stop_token_ids; SFT: the EOS)
};

// The tokenizer file of a config: tokenizer.path, or data/<task>/tokenizer.model.
std::filesystem::path tokenizer_file(const RunConfig& config);

// Adds `fields` (a JSON object) to the run directory's run.json, replacing keys of the same name:
// the run's end record (its health; train: its start-up stages). open_run writes run.json at the
// start with everything the plan decided; nothing else writes it.
void record_in_run_json(const RunContext& ctx, const nlohmann::json& fields);

}  // namespace unstuck::train
