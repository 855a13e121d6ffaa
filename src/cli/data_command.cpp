// `unstuck data generate`: writes the train and test splits of a synthetic task (arithmetic or
// countdown) as JSONL, deterministically from --seed; the splits are disjoint problem sets.
// `unstuck data check`: what a run config's datasets become: record counts, prompt lengths in
// tokens, the prompts a run would drop as too long, and three prompts exactly as the model sees them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/data/dataset.h"
#include "unstuck/data/generators.h"
#include "unstuck/data/prompt_formatter.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/evaluate.h"
#include "unstuck/train/run_setup.h"
#include "unstuck/train/sft.h"
#include "unstuck/rollout/tools.h"

namespace unstuck::cli {
namespace {

struct GenerateArgs {
  std::string task;
  int64_t n = 0;
  uint64_t seed = 1;
  std::string out;
  data::DataConfig config;
};

void generate(const GenerateArgs& args) {
  data::DataConfig config = args.config;
  config.task = args.task == "countdown" ? data::TaskKind::countdown : data::TaskKind::arithmetic;
  data::validate(config);
  const auto n_test = static_cast<int64_t>(std::llround(static_cast<double>(args.n) * config.test_fraction));
  const int64_t n_train = args.n - n_test;
  const std::filesystem::path dir = args.out;
  const auto train = data::generate_records(config, args.seed, n_train, data::Split::train);
  const auto test = data::generate_records(config, args.seed, n_test, data::Split::test);
  data::write_jsonl(dir / "train.jsonl", train);
  data::write_jsonl(dir / "test.jsonl", test);
  std::cout << "wrote " << train.size() << " train records to " << (dir / "train.jsonl").string() << "\nwrote "
            << test.size() << " test records to " << (dir / "test.jsonl").string() << "\n";
}

void add_generate(CLI::App& parent) {
  auto args = std::make_shared<GenerateArgs>();
  data::DataConfig& c = args->config;
  CLI::App* gen =
      parent.add_subcommand("generate",
                            "Generate disjoint train/test splits of a synthetic task into DIR/train.jsonl and "
                            "DIR/test.jsonl");
  gen->add_option("--task", args->task, "task to generate: arithmetic or countdown")
      ->required()
      ->check(CLI::IsMember({"arithmetic", "countdown"}));
  gen->add_option("--n", args->n, "records in total (train + test)")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  gen->add_option("--seed", args->seed, "generator seed")->capture_default_str();
  gen->add_option("--out", args->out, "output folder, e.g. data/countdown/")->required();
  gen->add_option("--test-fraction", c.test_fraction,
                  "share of the records (and of the problem space) that goes to test")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  gen->add_option("--min-digits", c.arithmetic.min_digits, "arithmetic: fewest operand digits")->capture_default_str();
  gen->add_option("--max-digits", c.arithmetic.max_digits, "arithmetic: most operand digits")->capture_default_str();
  gen->add_option("--ops", c.arithmetic.ops, "arithmetic: operations, add and/or mul")
      ->delimiter(',')
      ->capture_default_str();
  gen->add_option("--count", c.countdown.count, "countdown: numbers per instance")->capture_default_str();
  gen->add_option("--min-number", c.countdown.min_number, "countdown: smallest number")->capture_default_str();
  gen->add_option("--max-number", c.countdown.max_number, "countdown: largest number")->capture_default_str();
  gen->add_option("--min-target", c.countdown.min_target, "countdown: smallest target")->capture_default_str();
  gen->add_option("--max-target", c.countdown.max_target, "countdown: largest target")->capture_default_str();
  gen->callback([args] { generate(*args); });
}

// Nearest-rank percentile of sorted values.
int64_t percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(q / 100.0 * double(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

struct CheckArgs {
  std::string config;
  std::vector<std::string> overrides;
  int examples = 3;
};

void check(const CheckArgs& args) {
  RunConfig cfg = load_run_config(args.config, args.overrides);
  // As `unstuck train` resolves them: a GRPO run takes its tokenizer and max_seq_len from the base model.
  if (!cfg.grpo.base_model.empty()) {
    const std::filesystem::path base = cfg.grpo.base_model;
    if (cfg.tokenizer.path.empty()) cfg.tokenizer.path = base.string();  // tokenizer.json or tokenizer.model
    cfg.model.max_seq_len = model::read_hf_config(base / "config.json").model.max_seq_len;
  }
  const std::filesystem::path tok_path = train::tokenizer_file(cfg);
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tok_path);
  data::PromptFormatter prompts(cfg.data, std::filesystem::is_directory(tok_path) ? tok_path : tok_path.parent_path());
  // With tools.functions the prompts render the tools' schemas, as `unstuck train` renders them.
  if (cfg.tools.enabled()) {
    prompts = prompts.with_tools(rollout::ToolRunner(cfg.tools).schemas());
    rollout::tool_call_format(prompts);  // as train refuses a template whose tool calls it cannot read
  }
  const int64_t max_prompt = cfg.model.max_seq_len - cfg.rollout.max_new_tokens;
  std::cout << "tokenizer " << tok_path.string() << "; prompts from " << prompts.describe()
            << (prompts.prepend_bos() ? " after BOS" : "") << "\nprompt limit " << max_prompt
            << " tokens (model.max_seq_len " << cfg.model.max_seq_len << " - rollout.max_new_tokens "
            << cfg.rollout.max_new_tokens << ")\n";
  std::vector<data::TaskRecord> shown;
  for (const auto& [split, path] :
       {std::pair{"train", data::train_file(cfg.data)}, {"test", data::test_file(cfg.data)}}) {
    if (!std::filesystem::exists(path)) {
      std::cout << split << ": " << path.string() << " does not exist\n";
      continue;
    }
    std::vector<data::TaskRecord> records = data::read_dataset(path, cfg.data);
    const size_t n = records.size();
    train::PromptFit fit = train::fit_prompts(std::move(records), prompts, tok, max_prompt);
    std::vector<int64_t> sorted = fit.lengths;
    std::sort(sorted.begin(), sorted.end());
    std::cout << split << ": " << n << " records (" << path.string() << ")\n  prompt tokens: min "
              << (sorted.empty() ? 0 : sorted.front()) << ", p50 " << percentile(sorted, 50) << ", p90 "
              << percentile(sorted, 90) << ", p99 " << percentile(sorted, 99) << ", max " << fit.longest
              << "\n  dropped (longer than " << max_prompt << " tokens): " << fit.dropped << "\n";
    for (auto& r : fit.kept)
      if (int(shown.size()) < args.examples) shown.push_back(std::move(r));
  }
  const std::string bos = prompts.prepend_bos() && tok.bos_id() >= 0 ? tok.id_to_piece(tok.bos_id()) : "";
  for (size_t i = 0; i < shown.size(); ++i) {
    const std::vector<int32_t> ids = train::prompt_ids(shown[i], prompts, tok);
    std::cout << "--- prompt " << i + 1 << " (" << ids.size() << " tokens; reference answer: " << shown[i].answer
              << ") ---\n"
              << bos << prompts.render(shown[i]) << "\n--- end of prompt " << i + 1 << " ---\n";
  }
}

void add_check(CLI::App& parent) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = parent.add_subcommand(
      "check",
      "Load a run config's datasets as a run would: record counts, prompt-length percentiles in tokens, "
      "prompts dropped as too long, and prompts exactly as the model sees them");
  cmd->add_option("--config", args->config, "run config YAML, e.g. configs/examples/gsm8k_qwen2.5.yaml")->required();
  cmd->add_option("--examples", args->examples, "rendered prompts to print")->capture_default_str();
  cmd->add_option("overrides", args->overrides, "key=value overrides, e.g. data.train_path=...");
  cmd->callback([args] { check(*args); });
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Datasets: generate synthetic tasks, check a run's datasets and prompts");
  add_generate(*data);
  add_check(*data);
  // Bare `unstuck data` prints this command's help (CLI11 runs sub-command callbacks first).
  data->callback([data] {
    if (data->get_subcommands().empty()) throw CLI::CallForHelp();
  });
}

}  // namespace unstuck::cli
