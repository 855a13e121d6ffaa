// `unstuck config`: resolve a run config (defaults < file < overrides), validate it and print it,
// check a run's plan, plan a run's memory per rank for a model shape and world sizes, or print the
// reference of every key with its type, default and doc.
#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/config/run_config.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/train/memory_plan.h"
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

// One world size's plan, as `config plan` prints and writes it.
nlohmann::json plan_row(const RunConfig& cfg, int64_t world, int64_t prompt_tokens, double gpu_bytes) {
  train::MemoryPlanInputs in;
  in.gpu = true;
  in.world_size = world;
  in.longest_prompt = prompt_tokens;
  const train::MemoryPlan p = train::plan_memory(cfg, "train", in);
  nlohmann::json phases = nlohmann::json::object();
  for (const std::string& ph : p.phases()) phases[ph] = p.phase_peak(ph);
  return {{"world_size", world},          {"peak_bytes", p.peak()},     {"peak_phase", p.peak_phase()},
          {"held_bytes", p.held()},       {"phase_peak_bytes", phases}, {"host_bytes", p.host_bytes()},
          {"fits", p.peak() <= gpu_bytes}};
}

// `unstuck config plan`: the memory plan per rank of a GRPO run for a model's shape (its
// config.json; no weights, data or devices are read) at several world sizes on GPUs of a given
// memory: the held state, every phase's peak, and whether it fits.
void add_plan(CLI::App& config) {
  struct Args {
    std::string file, model, gpu_memory = "80GB";
    std::string worlds = "1";
    int64_t prompt_tokens = -1;
    bool json = false;
    std::vector<std::string> overrides;
  };
  auto a = std::make_shared<Args>();
  CLI::App* plan = config.add_subcommand(
      "plan",
      "The memory plan per rank of a GRPO run (`train`) for a model's config.json at several world sizes on "
      "GPUs: what each rank holds, the peak of every phase, and whether it fits; reads no weights or data");
  plan->add_option("--config", a->file, "run config YAML (its grpo, rollout, precision, lora keys)")->required();
  plan->add_option("--model", a->model, "a model directory or its config.json (the shape; weights not needed)")
      ->required();
  plan->add_option("--world-size", a->worlds, "ranks (GPUs), comma-separated, e.g. 1,8,16,64 (default 1)");
  plan->add_option("--gpu-memory", a->gpu_memory, "each GPU's memory, e.g. 80GB (10^9 bytes) or 141GB");
  plan->add_option("--prompt-tokens", a->prompt_tokens,
                   "the longest prompt in tokens (default: model.max_seq_len - rollout.max_new_tokens)");
  plan->add_flag("--json", a->json, "print one JSON object");
  plan->add_option("overrides", a->overrides, "key=value overrides, e.g. precision.mode=bf16_sr");
  plan->callback([a] {
    RunConfig cfg = load_run_config(a->file, a->overrides);
    const std::filesystem::path file = std::filesystem::is_directory(a->model)
                                           ? std::filesystem::path(a->model) / "config.json"
                                           : std::filesystem::path(a->model);
    const model::HfConfig hf = model::read_hf_config(file);
    const bool activation_checkpointing = cfg.model.activation_checkpointing;
    cfg.model = hf.model;
    cfg.model.activation_checkpointing = activation_checkpointing;
    train::check_limits(cfg);
    const double gpu = double(io::parse_byte_size(a->gpu_memory, "--gpu-memory"));
    nlohmann::json rows = nlohmann::json::array();
    std::stringstream list(a->worlds);
    for (std::string item; std::getline(list, item, ',');) {
      std::size_t used = 0;
      long long w = 0;
      try {
        w = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || w < 1)
        throw UserError("config plan: --world-size takes counts of at least 1 separated by commas, got '" + a->worlds +
                        "'");
      rows.push_back(plan_row(cfg, int64_t(w), a->prompt_tokens, gpu));
    }
    if (a->json) {
      std::cout << nlohmann::json{{"model", file.string()}, {"gpu_bytes", gpu}, {"plans", rows}}.dump() << "\n";
      return;
    }
    std::cout << "per-rank memory plan of `train` for " << file.string() << " (GPUs of " << a->gpu_memory << ")\n";
    for (const nlohmann::json& r : rows)
      std::cout << "  world size " << r["world_size"].get<int64_t>() << ": peak "
                << train::format_bytes(r["peak_bytes"]) << " (" << r["peak_phase"].get<std::string>() << "), held "
                << train::format_bytes(r["held_bytes"]) << (r["fits"].get<bool>() ? ", fits" : ", does not fit")
                << "\n";
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
  add_plan(*config);
  add_docs(*config);
  // Bare `unstuck config` prints this command's help (CLI11 runs sub-command callbacks first).
  config->callback([config] {
    if (config->get_subcommands().empty()) throw CLI::CallForHelp();
  });
}

}  // namespace unstuck::cli
