// `unstuck sft`, `unstuck eval` and `unstuck generate`: train the base policy, measure a policy on a
// task split, and sample completions from it.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/common/parallel.h"
#include "unstuck/config/config.h"
#include "unstuck/data/dataset.h"
#include "unstuck/train/memory_plan.h"
#include "unstuck/data/record.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/reward/verifier.h"
#include "unstuck/rollout/sampler.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/evaluate.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/policy_dir.h"
#include "unstuck/train/run_plan.h"
#include "unstuck/train/torch_device.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/sft.h"
#include "train/tool_turns.h"

namespace unstuck::cli {
namespace {

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  throw UserError("--dtype must be fp32 or bf16, got '" + name + "'");
}

}  // namespace

RunConfig load_train_config(const std::string& config, const std::string& resume,
                            const std::vector<std::string>& overrides) {
  if (config.empty() && resume.empty()) throw UserError("give --config FILE or --resume RUN_DIR");
  std::filesystem::path cfg_path = config, resume_run_dir;
  if (!resume.empty()) {
    const std::filesystem::path ckpt = train::resolve_resume_checkpoint(resume);
    resume_run_dir = std::filesystem::absolute(ckpt).lexically_normal().parent_path().parent_path();
    cfg_path = resume_run_dir / "config.yaml";
  }
  RunConfig cfg = load_run_config(cfg_path, overrides);
  if (!resume_run_dir.empty()) {
    // Resume into the directory given, wherever the run was first written (a moved or copied run
    // keeps writing where it is now, never into the recorded old place).
    cfg.run.output_dir = resume_run_dir.parent_path().string();
    cfg.run.name = resume_run_dir.filename().string();
  }
  return cfg;
}

namespace {

void add_sft(CLI::App& app) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("sft",
                         "Train the base policy from scratch on the task's solutions (loss on the completion), "
                         "evaluate greedy accuracy, write a model directory");
  cmd->add_option("--config", a->config, "run config YAML, e.g. configs/sft/arithmetic.yaml")->required();
  cmd->add_option("overrides", a->overrides, "key=value overrides, e.g. sft.steps=200 model.dim=64");
  cmd->callback([a] {
    const train::SftResult r = train::run_sft(load_run_config(a->config, a->overrides));
    std::cout << "greedy test accuracy " << r.accuracy << " after " << r.steps << " steps (" << r.seconds
              << " s); model: " << r.model_dir.string() << "\n";
    if (r.health_failed) {
      std::cerr << "error: the run failed: " << r.health_summary << "\n";
      throw ExitCode{3};
    }
  });
}

void add_train(CLI::App& app) {
  struct Args {
    std::string config, resume;
    std::vector<std::string> overrides;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("train",
                         "GRPO from a base policy with verifiable rewards, in the configured precision mode; "
                         "metrics per step in <run dir>/metrics.jsonl");
  auto* config = cmd->add_option("--config", a->config, "run config YAML, e.g. configs/grpo/countdown.yaml");
  auto* resume = cmd->add_option("--resume", a->resume,
                                 "continue a run: its directory (newest checkpoint) or a checkpoint directory; "
                                 "the run's config.yaml is used, overrides still apply");
  config->excludes(resume);
  cmd->add_option("overrides", a->overrides, "key=value overrides, e.g. precision.mode=bf16 optim.lr=3e-5");
  cmd->callback([a] {
    RunConfig cfg = load_train_config(a->config, a->resume, a->overrides);
    // Several ranks when started by `unstuck launch`, torchrun or Slurm (RANK, WORLD_SIZE, ...).
    const auto comm = dist::make_communicator(cfg.dist, dist::launch_env_from_environment());
    train::keep_stop_signals_after_a_failed_run();  // a failure's one line is printed before any SIGTERM ends us
    const train::GrpoResult r = train::run_grpo(std::move(cfg), a->resume, comm.get());
    if (comm->rank() == 0) {  // rank 0 reports for the run
      if (r.dropped_step)
        std::cout << "stopped during step " << r.steps + 1
                  << " (not applied; the newest checkpoint is kept); continue with: unstuck train --resume "
                  << r.run_dir.string() << "\n";
      else if (r.interrupted)
        std::cout << "stopped after step " << r.steps << " (checkpoint written); continue with: unstuck train --resume "
                  << r.run_dir.string() << "\n";
      else
        std::cout << "reward " << r.first_reward_mean << " -> " << r.last_reward_mean << " over " << r.steps
                  << " steps; final greedy test accuracy " << r.final_eval_accuracy << "; run: " << r.run_dir.string()
                  << "\n";
    }
    if (r.health_failed) {  // every rank saw the same reduced metrics
      std::cerr << "error: the run failed: " << r.health_summary << "\n";
      throw ExitCode{3};
    }
  });
}

void add_eval(CLI::App& app) {
  struct Args {
    std::string model, split = "test", dtype = "fp32";
    int64_t samples = 0, k = 0, batch = 128;
    double temperature = 1.0;
    uint64_t seed = 0;
    bool json = false;
    std::vector<std::string> overrides;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("eval", "Greedy accuracy (and sampled pass@k) of a policy on a task split");
  cmd->add_option("--model", a->model, "policy directory (an `unstuck sft` output)")->required();
  cmd->add_option("--split", a->split, "test or train")->check(CLI::IsMember({"test", "train"}))->capture_default_str();
  cmd->add_option("--samples", a->samples, "records to evaluate (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--k", a->k, "sampled completions per prompt for pass@k (0 = greedy only)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", a->temperature, "temperature of the pass@k samples")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the pass@k samples")->capture_default_str();
  cmd->add_option("--batch", a->batch, "prompts decoded together")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "compute dtype: fp32 or bf16")->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->add_option("overrides", a->overrides, "key=value overrides of the model's run config, e.g. data.test_path=...");
  cmd->callback([a] {
    // The task (verifier, templates) comes from the model's run config or from the command line,
    // never from a default: a countdown model scored on arithmetic would report a silent 0.
    bool task_given = false;
    for (const std::string& o : a->overrides)
      task_given = task_given || o.rfind("data.task=", 0) == 0 || o.rfind("reward.verifier=", 0) == 0;
    if (!task_given && !std::filesystem::exists(std::filesystem::path(a->model) / train::kRunConfigFile))
      throw UserError("eval: model directory '" + a->model + "' has no " + train::kRunConfigFile +
                      " (the run config naming its task and templates); give the task, e.g. `unstuck eval --model " +
                      a->model + " data.task=countdown`");
    // The plan reads the model directory's configs, the tokenizer and the split, and checks the
    // memory, before any weight is loaded.
    train::RunRequest request;
    request.command = "eval";
    request.model_dir = a->model;
    request.split = a->split;
    request.samples = a->samples;
    const auto comm = dist::make_single_process_communicator();
    train::RunPlan plan = train::plan_run(train::policy_run_config(a->model, a->overrides), request, *comm);
    train::report_prompt_fit(plan.test, plan.max_prompt_tokens, "eval");
    const RunConfig& c = plan.config;
    const model::LoadedModel loaded = model::load_pretrained(plan.model_dir, plan.hf);
    const model::LlamaModel model(c.model, loaded.flat.to(train::torch_device(plan.device), parse_dtype(a->dtype)));
    const auto verifier =
        reward::make_verifier(reward::verifier_name(c.reward, config::enum_name(c.data.task)), c.reward);
    train::EvalOptions o;
    o.max_new_tokens = c.rollout.max_new_tokens;
    o.batch_size = a->batch;
    o.k = a->k;
    o.temperature = a->temperature;
    o.seed = a->seed;
    o.stop_ids = plan.ctx.stop_ids;
    if (plan.tools)  // the model's tools: each batch's calls run, as in training's evaluation
      o.turns = train::eval_tool_turns(
          model, train::tool_turn_hooks(plan.ctx.tokenizer, plan.ctx.prompts, plan.tools, nullptr),
          train::tool_turn_limits(c.tools, c.rollout.max_new_tokens, c.model.max_seq_len), a->seed);
    train::check_environment_readers(*verifier, plan.tools.get());
    train::evaluate_with_environment(o, plan.tools, nullptr);
    const auto& path = plan.test_file;
    const train::EvalResult r =
        train::evaluate(model, plan.ctx.tokenizer, plan.test.kept, plan.ctx.prompts, *verifier, o);
    nlohmann::ordered_json j{{"model", a->model},
                             {"split", a->split},
                             {"records", r.records},
                             {"greedy_accuracy", r.accuracy},
                             {"mean_reward", r.mean_reward},
                             {"statuses", r.statuses}};
    if (a->k > 0) j["pass_at_" + std::to_string(a->k)] = r.pass_at_k;
    if (a->json) {
      std::cout << j.dump() << "\n";
      return;
    }
    std::cout << "records " << r.records << " (" << path.string() << ")\ngreedy accuracy " << r.accuracy
              << "\nmean reward " << r.mean_reward << "\n";
    if (a->k > 0) std::cout << "pass@" << a->k << " " << r.pass_at_k << "\n";
    for (const auto& [status, n] : r.statuses) std::cout << "  " << status << ": " << n << "\n";
    for (const auto& e : r.examples) std::cout << "  e.g. " << e << "\n";
  });
}

// `unstuck generate`'s arguments.
struct GenerateArgs {
  std::string model, prompt, prompts_file, dtype = "fp32", config;
  std::vector<std::string> overrides;
  double temperature = 0.0, top_p = 1.0;
  int64_t top_k = 0, max_new_tokens = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool json = false;
  bool temperature_given = false, top_k_given = false, top_p_given = false;
};

// --prompt, or --prompts-file's non-empty lines.
std::vector<std::string> prompt_texts(const GenerateArgs& a) {
  if (a.prompt.empty() && a.prompts_file.empty()) throw UserError("give --prompt or --prompts-file");
  std::vector<std::string> texts;
  if (!a.prompt.empty()) texts.push_back(a.prompt);
  if (!a.prompts_file.empty()) {
    std::ifstream in(a.prompts_file);
    if (!in) throw UserError("cannot open prompts file '" + a.prompts_file + "'");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  return texts;
}

// Sampling: the flags given, else the --config's rollout section, else greedy.
rollout::GenerateOptions generate_options(const GenerateArgs& a, const train::Policy& p) {
  rollout::GenerateOptions o;
  o.sampling = p.config.rollout;
  const bool from_config = !a.config.empty();
  if (!from_config || a.temperature_given) o.sampling.temperature = a.temperature;
  if (!from_config || a.top_k_given) o.sampling.top_k = a.top_k;
  if (!from_config || a.top_p_given) o.sampling.top_p = a.top_p;
  if (a.max_new_tokens > 0) o.sampling.max_new_tokens = a.max_new_tokens;
  o.stop_ids = p.stop_ids;
  o.pad_id = p.tokenizer.pad_id();
  return o;
}

// --json: one object per prompt, then the timing and sampling.
void print_generations_json(const GenerateArgs& a, const std::vector<std::string>& texts,
                            const std::vector<std::vector<int32_t>>& prompts,
                            const std::vector<rollout::Completion>& outs,
                            const std::vector<nlohmann::json>& conversations, const train::Policy& p,
                            const rollout::GenerateOptions& o, double load_seconds, double seconds) {
  int64_t tokens = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    tokens += int64_t(outs[i].tokens.size());
    nlohmann::ordered_json j = {
        {"prompt", texts[i]},
        {"prompt_ids", prompts[i]},
        {"ids", outs[i].tokens},
        {"logprobs", outs[i].logprobs},
        {"text", train::completion_text(train::last_assistant_turn(outs[i]), p.tokenizer, p.stop_ids)},
        {"finish", config::enum_name(outs[i].finish)}};
    if (!conversations.empty()) j["messages"] = conversations[i];  // with tools: text is the last turn
    // Invalid UTF-8 a random model may sample is replaced, never an exception.
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  const nlohmann::ordered_json timing = {{"timing",
                                          {{"load_seconds", load_seconds},
                                           {"generate_seconds", seconds},
                                           {"prompts", outs.size()},
                                           {"tokens", tokens},
                                           {"tokens_per_s", double(tokens) / std::max(seconds, 1e-9)},
                                           {"threads", at::get_num_threads()}}},
                                         {"sampling",
                                          {{"temperature", o.sampling.temperature},
                                           {"top_k", o.sampling.top_k},
                                           {"top_p", o.sampling.top_p},
                                           {"max_new_tokens", o.sampling.max_new_tokens},
                                           {"seed", a.seed}}}};
  std::cout << timing.dump() << "\n";
}

void run_generate(const GenerateArgs& a) {
  const std::vector<std::string> texts = prompt_texts(a);
  at::set_num_threads(resolve_threads(a.threads));
  const auto t_load = std::chrono::steady_clock::now();
  train::Policy p = train::load_policy(a.model, a.overrides, parse_dtype(a.dtype));
  if (!a.config.empty()) {
    // The user's run config formats the prompts as its training would (its overrides on top).
    const RunConfig user = load_run_config(a.config, a.overrides);
    p.config.data = user.data;
    p.config.rollout = user.rollout;
    p.config.tools = user.tools;
  }
  rollout::GenerateOptions o = generate_options(a, p);
  data::PromptFormatter formatter(p.config.data, a.model);
  std::shared_ptr<rollout::ToolRunner> tools;  // the config's (or the model's) tools: calls run, as in training
  if (p.config.tools.enabled()) {
    tools = std::make_shared<rollout::ToolRunner>(p.config.tools);
    formatter = formatter.with_tools(tools->schemas());
    o.contexts = std::make_shared<rollout::KeptContexts>();  // each tool round continues the rows' caches
  }
  std::vector<data::TaskRecord> records(texts.size());
  std::vector<const data::TaskRecord*> record_of;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    records[i].task = config::enum_name(p.config.data.task);
    records[i].prompt = texts[i];
    record_of.push_back(&records[i]);
  }
  // tools.environment: each prompt's instance reset with it (its prompt and task are its row)
  train::EvalOptions environment;
  train::evaluate_with_environment(environment, tools, nullptr);
  const std::vector<std::string> seen =
      environment.observations ? environment.observations(record_of) : std::vector<std::string>(texts.size());
  std::vector<std::vector<int32_t>> prompts;
  for (std::size_t i = 0; i < records.size(); ++i)
    prompts.push_back(train::observed_prompt_ids(records[i], formatter, p.tokenizer, seen[i],
                                                 p.config.model.max_seq_len - o.sampling.max_new_tokens,
                                                 tools ? tools->environment_class() : ""));
  const auto t0 = std::chrono::steady_clock::now();
  auto outs = rollout::generate(*p.model, prompts, o, at::make_generator<at::CPUGeneratorImpl>(a.seed));
  std::vector<nlohmann::json> conversations;
  if (tools)
    conversations = train::eval_tool_turns(
        *p.model, train::tool_turn_hooks(p.tokenizer, formatter, tools, nullptr),
        train::tool_turn_limits(p.config.tools, o.sampling.max_new_tokens, p.config.model.max_seq_len),
        a.seed)(prompts, outs, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double load_seconds = std::chrono::duration<double>(t0 - t_load).count();
  if (a.json) return print_generations_json(a, texts, prompts, outs, conversations, p, o, load_seconds, seconds);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (tools) {  // the conversation: each assistant turn, its calls and their results
      std::cout << texts[i] << "\n";
      for (const nlohmann::json& m : conversations[i]) std::cout << "  " << m.dump() << "\n";
      std::cout << "  [" << config::enum_name(outs[i].finish) << "]\n";
      continue;
    }
    std::cout << texts[i] << "\t" << train::completion_text(outs[i].tokens, p.tokenizer, p.stop_ids) << "\t["
              << config::enum_name(outs[i].finish) << "]\n";
  }
}

void add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample completions of a policy for prompts");
  cmd->add_option("--model", a->model, "policy directory (an `unstuck sft` output or a Hugging Face model directory)")
      ->required();
  auto* one =
      cmd->add_option("--prompt", a->prompt, "problem text, e.g. \"12+35=\" (the model's prompt template applies)");
  auto* many = cmd->add_option("--prompts-file", a->prompts_file, "file with one problem per line");
  one->excludes(many);
  cmd->add_option("--config", a->config,
                  "run config YAML whose data (chat template, system prompt, prompt template) and rollout "
                  "sections format the prompts, and whose tools (if any) the policy calls, e.g. "
                  "configs/examples/gsm8k_qwen2.5.yaml");
  cmd->add_option("overrides", a->overrides, "key=value overrides of the policy's config, e.g. data.system_prompt=...");
  CLI::Option* temperature =
      cmd->add_option("--temperature", a->temperature, "0 = greedy (default; with --config, its rollout.temperature)");
  CLI::Option* top_k = cmd->add_option("--top-k", a->top_k, "0 = off (default; with --config, its rollout.top_k)");
  CLI::Option* top_p = cmd->add_option("--top-p", a->top_p, "1 = off (default; with --config, its rollout.top_p)");
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "0 = the config's rollout.max_new_tokens");
  cmd->add_option("--seed", a->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "compute dtype: fp32 or bf16")->capture_default_str();
  cmd->add_option("--threads", a->threads, "libtorch threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", a->json,
                "one JSON object per prompt (prompt, prompt_ids, ids, logprobs, text, finish) and a last one with "
                "the timing, instead of tab-separated lines");
  cmd->callback([a, temperature, top_k, top_p] {
    a->temperature_given = temperature->count() > 0;
    a->top_k_given = top_k->count() > 0;
    a->top_p_given = top_p->count() > 0;
    run_generate(*a);
  });
}

}  // namespace

void add_train_commands(CLI::App& app) {
  add_sft(app);
  add_train(app);
  add_eval(app);
  add_generate(app);
}

}  // namespace unstuck::cli
