// `unstuck bench ...`: benchmark programs that print ratios against baselines measured in the same
// run. Speed targets are checked here, never by timed tests.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_comm.h"
#include "bench/bench_generate.h"
#include "bench/bench_precision.h"
#include "bench/bench_reward.h"
#include "bench/bench_sample.h"
#include "bench/bench_step.h"
#include "bench/bench_tokenizer.h"
#include "cli/commands.h"
#include "unstuck/common/error.h"

namespace unstuck::cli {
namespace {

// bench precision: the rounding kernels and the fused AdamW against their baselines.
void add_precision_bench(CLI::App& bench) {
  auto opts = std::make_shared<bench::PrecisionBenchOptions>();
  CLI::App* precision = bench.add_subcommand(
      "precision", "Rounding kernels and fused AdamW vs a plain copy, libtorch's cast and unfused libtorch ops");
  precision->add_flag("--json", opts->json, "Print one JSON object instead of the table");
  precision->add_option("--elements", opts->elements, "Buffer length in FP32 elements")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  precision->add_option("--repeats", opts->repeats, "Timed repetitions per measurement (best is kept)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  precision->add_option("--threads", opts->threads, "Threads for the all-threads figures (0 = all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  precision->callback([opts] { bench::run_precision_bench(*opts, std::cout); });
}

// bench generate: batched sampling with the KV cache against recompute, or a config's rollout.
void add_generate_bench(CLI::App& bench) {
  auto gen = std::make_shared<bench::GenerateBenchOptions>();
  CLI::App* generate =
      bench.add_subcommand("generate", "Batched sampling tokens/s with the KV cache vs full recompute, FP32 and BF16");
  generate->add_flag("--json", gen->json, "Print one JSON object instead of the table");
  generate->add_option("--sequences", gen->sequences, "Prompts sampled together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  generate->add_option("--prompt-tokens", gen->prompt_tokens, "Tokens per prompt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  generate->add_option("--new-tokens", gen->new_tokens, "Tokens generated per sequence")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  generate->add_option("--threads", gen->threads, "libtorch threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  generate->add_option("--repeats", gen->repeats, "Timed runs per measurement after a warm-up (median, range)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  generate->add_option("--dtype", gen->dtype, "Compute dtype: fp32, bf16 or both")
      ->check(CLI::IsMember({"fp32", "bf16", "both"}))
      ->capture_default_str();
  generate->add_flag(
      "--no-recompute", [gen](int64_t) { gen->recompute = false; }, "Skip the full-recompute baseline (no kv_speedup)");
  generate->add_option("--model", gen->model,
                       "a model directory (config.json, safetensors) to time instead of the default shape");
  generate->add_option("--device", gen->device, "cpu, cuda or cuda:N")->capture_default_str();
  generate
      ->add_option("--decode", gen->decode,
                   "rollout.decode modes to time, comma-separated: auto, dynamic, fixed, graphs (the first is the "
                   "kv_* figure)")
      ->capture_default_str();
  generate->add_option(
      "--config", gen->config,
      "time this run config's rollout: its policy (grpo.base_model, or --model), its first "
      "grpo.prompts_per_step training prompts x grpo.group_size, its rollout sampling and stop tokens, "
      "precision.mode's dtype, precision.threads, run.device; the options above override it");
  generate->callback([gen, generate] {
    for (const char* name :
         {"--sequences", "--prompt-tokens", "--new-tokens", "--threads", "--dtype", "--device", "--decode"})
      if (generate->count(name) > 0) gen->given.push_back(name);
    if (!gen->config.empty() && generate->count("--prompt-tokens") > 0)
      throw UserError(
          "bench generate: --prompt-tokens and --config: with a config the prompts are its training prompts");
    bench::run_generate_bench(*gen, std::cout);
  });
}

// bench step: the GRPO step per precision mode.
void add_step_bench(CLI::App& bench) {
  auto step = std::make_shared<bench::StepBenchOptions>();
  CLI::App* step_cmd = bench.add_subcommand(
      "step", "GRPO step time per precision mode with phase breakdown and sr_overhead (bf16_sr / bf16)");
  step_cmd->add_flag("--json", step->json, "Print one JSON object instead of the table");
  step_cmd->add_option("--config", step->config, "GRPO config to time")->capture_default_str();
  step_cmd->add_option("--model", step->model, "base policy directory (default: the config's, else random init)");
  step_cmd->add_option("--steps", step->steps, "rollout batches per run (first is warm-up)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  step_cmd->add_option("--repeats", step->repeats, "runs per mode; best kept")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  step_cmd->add_option("--device", step->device, "run.device of the timed runs: auto | cpu | cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  step_cmd
      ->add_option("--peak-tflops", step->peak_tflops,
                   "device peak (TFLOP/s) for model_flop_utilization; default: estimated from the CPU's cores")
      ->check(CLI::NonNegativeNumber);
  step_cmd->add_option("--modes", step->modes, "comma-separated precision modes to time (default: all)");
  step_cmd->callback([step] { bench::run_step_bench(*step, std::cout); });
}

// bench comm: the ZeRO-1 step's collectives at world size 1 and 2.
void add_comm_bench(CLI::App& bench) {
  auto comm = std::make_shared<bench::CommBenchOptions>();
  CLI::App* comm_cmd = bench.add_subcommand(
      "comm", "Collective bytes and time per ZeRO-1 optimizer step, world size 1 vs 2 (Gloo), vs the minimum");
  comm_cmd->add_flag("--json", comm->json, "Print one JSON object instead of the table");
  comm_cmd->add_option("--config", comm->config, "GRPO config: model shape (its base model) and precision")
      ->capture_default_str();
  comm_cmd->add_option("--steps", comm->steps, "optimizer steps per world size (first is warm-up)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  comm_cmd->add_option("--worker-out", comm->worker_out, "internal: run as a rank of the world-size-2 measurement")
      ->group("");
  comm_cmd->callback([comm] { bench::run_comm_bench(*comm, std::cout); });
}

// bench sample: the fused CPU sampler against libtorch's ops on one step's logits.
void add_sample_bench(CLI::App& bench) {
  auto opts = std::make_shared<bench::SampleBenchOptions>();
  CLI::App* sample = bench.add_subcommand(
      "sample", "One decode step's draw from (rows, vocab) logits: the fused CPU sampler vs libtorch's ops");
  sample->add_flag("--json", opts->json, "Print one JSON object instead of the table");
  sample->add_option("--rows", opts->rows, "Rows drawn per step")->check(CLI::PositiveNumber)->capture_default_str();
  sample->add_option("--vocab", opts->vocab, "Logits per row")->check(CLI::PositiveNumber)->capture_default_str();
  sample->add_option("--threads", opts->threads, "libtorch threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sample->add_option("--repeats", opts->repeats, "Timed rounds after a warm-up (best kept)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sample->add_option("--device", opts->device, "cpu, cuda or cuda:N (CUDA: greedy and temperature 1)")
      ->capture_default_str();
  sample->callback([opts] { bench::run_sample_bench(*opts, std::cout); });
}

// bench tokenizer: tokenizer.json encoding against the Python `tokenizers`.
void add_tokenizer_bench(CLI::App& bench) {
  auto tok = std::make_shared<bench::TokenizerBenchOptions>();
  CLI::App* tok_cmd = bench.add_subcommand(
      "tokenizer", "tokenizer.json encode MB/s on one thread vs the Python `tokenizers` library, same text");
  tok_cmd->add_flag("--json", tok->json, "Print one JSON object instead of the table");
  tok_cmd->add_option("--tokenizer", tok->tokenizer,
                      "model directory or tokenizer.json (default: train a Llama-3-style one)");
  tok_cmd->add_option("--text", tok->text, "UTF-8 text encoded line by line (default: a generated corpus)");
  tok_cmd->add_option("--megabytes", tok->megabytes, "size of the generated corpus")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tok_cmd->add_option("--repeats", tok->repeats, "timed passes per side (best kept)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  tok_cmd->add_option("--python", tok->python, "Python with `tokenizers` (default: $UNSTUCK_PYTHON, .venv, python3)");
  tok_cmd->callback([tok] { bench::run_tokenizer_bench(*tok, std::cout); });
}

// bench reward: the verifiers, reward functions and code sandboxes, or the user's own scorer.
void add_reward_bench(CLI::App& bench) {
  auto rew = std::make_shared<bench::RewardBenchOptions>();
  CLI::App* reward_cmd = bench.add_subcommand(
      "reward",
      "Verifier completions/s (math, countdown), worst case, math-verify on the same corpus, reward "
      "functions on 1 and 2 workers, the code verifier on 1 and 2 sandboxes");
  reward_cmd->add_flag("--json", rew->json, "Print one JSON object instead of the table");
  reward_cmd->add_option("--corpus", rew->corpus, "graded math corpus (JSONL)")->capture_default_str();
  reward_cmd
      ->add_option("--python", rew->python,
                   "Python with math-verify for the baseline (\"\" skips it); it also runs the timed reward "
                   "function (\"\": python3)")
      ->capture_default_str();
  reward_cmd->add_option("--repeats", rew->repeats, "passes over the corpus per timing")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  reward_cmd
      ->add_option("--function-completions", rew->function_completions,
                   "completions the reward function scores on 1 and 2 workers")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  reward_cmd
      ->add_option("--code-completions", rew->code_completions,
                   "MBPP-style completions the code verifier runs on 1 and 2 sandboxes")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  // --config: the user's own scorer on the user's completions instead of the embedded benchmarks.
  auto user = std::make_shared<std::tuple<std::string, std::string, int, std::vector<std::string>>>(
      "", "", 3, std::vector<std::string>{});
  CLI::Option* config = reward_cmd->add_option(
      "--config", std::get<0>(*user),
      "time this run config's scorer (reward.function, reward.command, reward.terms or its verifier) on --input's "
      "completions instead of the embedded benchmarks");
  reward_cmd
      ->add_option("--input", std::get<1>(*user),
                   "with --config: JSONL of records with \"completion\", as `reward score --config` reads them")
      ->needs(config);
  reward_cmd->add_option("--passes", std::get<2>(*user), "with --config: timed passes over --input after the start")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str()
      ->needs(config);
  reward_cmd->add_option("overrides", std::get<3>(*user), "with --config: key=value overrides")->needs(config);
  reward_cmd->callback([rew, user] {
    const auto& [config_file, input, passes, overrides] = *user;
    if (config_file.empty()) {
      bench::run_reward_bench(*rew, std::cout);
      return;
    }
    if (input.empty()) throw UserError("bench reward --config needs --input (the completions to score)");
    time_configured_scorer(config_file, overrides, input, passes, rew->json, std::cout);
  });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print ratios against in-run baselines");
  bench->require_subcommand(1);
  add_precision_bench(*bench);
  add_generate_bench(*bench);
  add_step_bench(*bench);
  add_comm_bench(*bench);
  add_tokenizer_bench(*bench);
  add_reward_bench(*bench);
  add_sample_bench(*bench);
}

}  // namespace unstuck::cli
