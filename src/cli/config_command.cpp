// `unstuck config`: resolve a run config (defaults < file < overrides), validate it and print it,
// or print the reference of every key with its type, default and doc.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "unstuck/config/run_config.h"

namespace unstuck::cli {
namespace {

struct ShowArgs {
  std::string file;
  std::vector<std::string> overrides;
  bool no_docs = false;
};

void add_show(CLI::App& config) {
  auto args = std::make_shared<ShowArgs>();
  CLI::App* show = config.add_subcommand(
      "show",
      "Load a run config, apply key=value overrides, validate it and print the resolved "
      "YAML (what a run would write to <run dir>/config.yaml)");
  show->add_option("file", args->file, "run config YAML, e.g. configs/precision/default.yaml")
      ->required();
  show->add_option("overrides", args->overrides,
                   "overrides applied after the file, e.g. precision.mode=fp16 optim.lr=3e-6");
  show->add_flag("--no-docs", args->no_docs, "omit the doc comments");
  show->callback([args] {
    const RunConfig config = load_run_config(args->file, args->overrides);
    std::cout << resolved_yaml(config, !args->no_docs);
  });
}

void add_docs(CLI::App& config) {
  auto markdown = std::make_shared<bool>(false);
  CLI::App* docs =
      config.add_subcommand("docs", "List every config key with its type, default and description");
  docs->add_flag("--markdown", *markdown, "print a Markdown table (as in docs/CONFIG.md)");
  docs->callback([markdown] { std::cout << run_config_docs(*markdown); });
}

}  // namespace

void add_config_command(CLI::App& app) {
  CLI::App* config = app.add_subcommand(
      "config", "Inspect run configs: print a resolved config, or the reference of every key");
  add_show(*config);
  add_docs(*config);
  // Bare `unstuck config` prints this command's help (CLI11 runs sub-command callbacks first).
  config->callback([config] {
    if (config->get_subcommands().empty()) throw CLI::CallForHelp();
  });
}

}  // namespace unstuck::cli
