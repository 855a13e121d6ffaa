// `unstuck data generate`: writes the train and test splits of a synthetic task (arithmetic or
// countdown) as JSONL, deterministically from --seed; the splits are disjoint problem sets.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/data/generators.h"

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
  const auto n_test =
      static_cast<int64_t>(std::llround(static_cast<double>(args.n) * config.test_fraction));
  const int64_t n_train = args.n - n_test;
  const std::filesystem::path dir = args.out;
  const auto train = data::generate_records(config, args.seed, n_train, data::Split::train);
  const auto test = data::generate_records(config, args.seed, n_test, data::Split::test);
  data::write_jsonl(dir / "train.jsonl", train);
  data::write_jsonl(dir / "test.jsonl", test);
  std::cout << "wrote " << train.size() << " train records to " << (dir / "train.jsonl").string()
            << "\nwrote " << test.size() << " test records to " << (dir / "test.jsonl").string()
            << "\n";
}

void add_generate(CLI::App& parent) {
  auto args = std::make_shared<GenerateArgs>();
  data::DataConfig& c = args->config;
  CLI::App* gen = parent.add_subcommand(
      "generate",
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
  gen->add_option("--min-digits", c.arithmetic.min_digits, "arithmetic: fewest operand digits")
      ->capture_default_str();
  gen->add_option("--max-digits", c.arithmetic.max_digits, "arithmetic: most operand digits")
      ->capture_default_str();
  gen->add_option("--ops", c.arithmetic.ops, "arithmetic: operations, add and/or mul")
      ->delimiter(',')
      ->capture_default_str();
  gen->add_option("--count", c.countdown.count, "countdown: numbers per instance")
      ->capture_default_str();
  gen->add_option("--min-number", c.countdown.min_number, "countdown: smallest number")
      ->capture_default_str();
  gen->add_option("--max-number", c.countdown.max_number, "countdown: largest number")
      ->capture_default_str();
  gen->add_option("--min-target", c.countdown.min_target, "countdown: smallest target")
      ->capture_default_str();
  gen->add_option("--max-target", c.countdown.max_target, "countdown: largest target")
      ->capture_default_str();
  gen->callback([args] { generate(*args); });
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Synthetic task datasets (JSONL task records)");
  add_generate(*data);
  // Bare `unstuck data` prints this command's help (CLI11 runs sub-command callbacks first).
  data->callback([data] {
    if (data->get_subcommands().empty()) throw CLI::CallForHelp();
  });
}

}  // namespace unstuck::cli
