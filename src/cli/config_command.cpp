// `unstuck config`: resolve a run config (defaults < file < overrides), validate it and print it,
// or print the reference of every key with its type, default and doc.
#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/config/run_config.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/train/run_plan.h"

namespace unstuck::cli {
namespace {

struct ShowArgs {
  std::string file;
  std::vector<std::string> overrides;
  bool no_docs = false;
};

void add_show(CLI::App& config) {
  auto args = std::make_shared<ShowArgs>();
  CLI::App* show =
      config.add_subcommand("show",
                            "Load a run config, apply key=value overrides, validate it and print the resolved "
                            "YAML (what a run would write to <run dir>/config.yaml)");
  show->add_option("file", args->file, "run config YAML, e.g. configs/precision/default.yaml")->required();
  show->add_option("overrides", args->overrides,
                   "overrides applied after the file, e.g. precision.mode=fp16 optim.lr=3e-6");
  show->add_flag("--no-docs", args->no_docs, "omit the doc comments");
  show->callback([args] {
    const RunConfig config = load_run_config(args->file, args->overrides);
    std::cout << resolved_yaml(config, !args->no_docs);
  });
}

// The command a config file is written for: the one of `grpo:` and `sft:` it sets.
std::string command_of(const std::string& file) {
  const YAML::Node top = YAML::LoadFile(file);  // already loaded once by load_run_config: valid YAML
  const bool grpo = top.IsMap() && top["grpo"], sft = top.IsMap() && top["sft"];
  if (grpo != sft) return grpo ? "train" : "sft";
  throw UserError("config check: " + file + " sets " + (grpo ? "both grpo and sft" : "neither grpo nor sft") +
                  "; give --command train or --command sft");
}

// `unstuck config check`: the plan of a run, with every check its command runs before the first
// step, and no file written.
void add_check(CLI::App& config) {
  struct Args {
    std::string file, command, resume;
    std::vector<std::string> overrides;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* check = config.add_subcommand(
      "check",
      "Run every check `unstuck train` or `unstuck sft` runs before its first step (the config, the model "
      "directory's config.json and weight headers, the tokenizer, the data's fit in the context, the checkpoint "
      "to resume, the run directory, the memory plan against this machine) and print the run's plan; writes "
      "nothing. Exits 2 with the run's own message when a check fails");
  auto* file = check->add_option("--config", a->file, "run config YAML, e.g. configs/grpo/countdown.yaml");
  auto* resume = check->add_option("--resume", a->resume, "check a resume of this run or checkpoint directory (train)");
  file->excludes(resume);
  check
      ->add_option("--command", a->command,
                   "the command to check: train or sft (default: the one whose section, grpo "
                   "or sft, the file sets)")
      ->check(CLI::IsMember({"train", "sft"}));
  check->add_flag("--json", a->json, "print the plan as one JSON object (as run.json's \"plan\")");
  check->add_option("overrides", a->overrides, "key=value overrides, e.g. grpo.prompts_per_step=64");
  check->callback([a] {
    RunConfig cfg = load_train_config(a->file, a->resume, a->overrides);
    train::RunRequest request;
    request.command = !a->command.empty() ? a->command : !a->resume.empty() ? "train" : command_of(a->file);
    request.resume = a->resume;
    const auto comm = dist::make_single_process_communicator();
    const train::RunPlan plan = train::plan_run(std::move(cfg), request, *comm);
    if (a->json) {
      std::cout << plan.to_json().dump() << "\n";
      return;
    }
    std::cout << plan.describe() << "config check: ok; `unstuck " << request.command
              << "` would start with this plan (nothing was written)\n";
  });
}

void add_docs(CLI::App& config) {
  auto markdown = std::make_shared<bool>(false);
  CLI::App* docs = config.add_subcommand("docs", "List every config key with its type, default and description");
  docs->add_flag("--markdown", *markdown, "print a Markdown table (as in docs/CONFIG.md)");
  docs->callback([markdown] { std::cout << run_config_docs(*markdown); });
}

}  // namespace

void add_config_command(CLI::App& app) {
  CLI::App* config = app.add_subcommand(
      "config",
      "Inspect run configs: print a resolved config, check a run's plan before starting it, or print the "
      "reference of every key");
  add_show(*config);
  add_check(*config);
  add_docs(*config);
  // Bare `unstuck config` prints this command's help (CLI11 runs sub-command callbacks first).
  config->callback([config] {
    if (config->get_subcommands().empty()) throw CLI::CallForHelp();
  });
}

}  // namespace unstuck::cli
