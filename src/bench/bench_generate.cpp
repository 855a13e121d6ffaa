// `unstuck bench generate`: tokens/s of the rollout engine with the KV cache and with full
// recompute of the growing sequence at every step, on the same prompts and weights, FP32 and BF16;
// medians and ranges over repeated runs after a warm-up.
#include "bench/bench_generate.h"

#include "bench/bench_options.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/config/device.h"
#include "unstuck/config/run_config.h"
#include "unstuck/data/data_config.h"
#include "unstuck/data/dataset.h"
#include "unstuck/data/prompt_formatter.h"
#include "unstuck/common/parallel.h"
#include "unstuck/config/config.h"
#include "unstuck/model/model_io.h"
#include "unstuck/model/llama.h"
#include "unstuck/rollout/sampler.h"
#include "unstuck/train/policy_dir.h"
#include "unstuck/train/prompt_fit.h"

namespace unstuck::bench {
namespace {

using Json = nlohmann::ordered_json;

// One timed run: its seconds and the tokens it generated.
struct Run {
  double seconds = 0;
  double tokens = 0;
};

// Steady-state timing of one generation path: a warm-up run of the same shape (first-call set-up of
// libtorch's kernels and allocator is not measured; 4 tokens for the slow recompute path), then
// `repeats` timed runs. Without stop tokens every run must generate all tokens (the same work each).
std::vector<Run> time_runs(const model::LlamaModel& m, const std::vector<std::vector<int32_t>>& prompts,
                           const rollout::GenerateOptions& o, int repeats) {
  rollout::GenerateOptions warm = o;
  if (!o.use_cache) warm.sampling.max_new_tokens = std::min<int64_t>(4, o.sampling.max_new_tokens);  // slow path
  (void)rollout::generate(m, prompts, warm, at::make_generator<at::CPUGeneratorImpl>(1));
  std::vector<Run> runs;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = rollout::generate(m, prompts, o, at::make_generator<at::CPUGeneratorImpl>(2 + r));
    Run run{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0};
    for (const auto& c : out) {
      if (o.stop_ids.empty() && int64_t(c.tokens.size()) != o.sampling.max_new_tokens)
        throw std::logic_error("bench generate: short completion");
      run.tokens += double(c.tokens.size());
    }
    runs.push_back(run);
  }
  return runs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// {median tokens/s, [min, max] tokens/s, median seconds} of timed runs (tokens/s per run).
Json throughput(const std::vector<Run>& runs, const char* prefix) {
  std::vector<double> rates, seconds;
  for (const Run& r : runs) {
    rates.push_back(r.tokens / r.seconds);
    seconds.push_back(r.seconds);
  }
  const auto [lo, hi] = std::minmax_element(rates.begin(), rates.end());
  const std::string p(prefix);
  return {
      {p + "_tokens_per_s", median(rates)}, {p + "_tokens_per_s_range", {*lo, *hi}}, {p + "_seconds", median(seconds)}};
}

bool given(const GenerateBenchOptions& opt, const char* option) {
  return std::find(opt.given.begin(), opt.given.end(), option) != opt.given.end();
}

// The work of a run config (GenerateBenchOptions::config): its policy, its rows' prompts and sampling.
struct ConfigWork {
  GenerateBenchOptions options;  // with the config's values where no option was given
  model::ModelConfig model;
  torch::Tensor master;
  std::vector<std::vector<int32_t>> prompts;
  rollout::GenerateOptions generate;
  std::string base_model;
};

ConfigWork config_work(const GenerateBenchOptions& opt) {
  ConfigWork w;
  w.options = opt;
  const RunConfig c = load_run_config(opt.config);
  w.base_model = opt.model.empty() ? c.grpo.base_model : opt.model;
  if (!std::filesystem::is_regular_file(std::filesystem::path(w.base_model) / "config.json"))
    throw UserError(opt.model.empty()
                        ? "bench generate --config " + opt.config + ": grpo.base_model '" + w.base_model +
                              "' is not a model directory (config.json); train one (`unstuck sft`) or give --model"
                        : "bench generate --model '" + w.base_model + "' is not a model directory (config.json)");
  train::Policy p = train::load_policy(w.base_model, {"run.device=cpu"});  // its FP32 master, on the host
  w.model = p.config.model;
  w.master = std::move(p.master);
  GenerateBenchOptions& o = w.options;
  if (!given(opt, "--sequences")) o.sequences = c.grpo.prompts_per_step * c.grpo.group_size;
  if (!given(opt, "--new-tokens")) o.new_tokens = c.rollout.max_new_tokens;
  if (!given(opt, "--threads")) o.threads = c.precision.threads;
  if (!given(opt, "--device")) o.device = rank_device(c).name();
  if (!given(opt, "--decode")) o.decode = config::enum_name(c.rollout.decode);
  if (!given(opt, "--dtype")) o.dtype = c.precision.mode == precision::PrecisionMode::fp32 ? "fp32" : "bf16";
  o.recompute = false;
  w.generate.sampling = c.rollout;
  w.generate.sampling.max_new_tokens = o.new_tokens;
  w.generate.stop_ids = p.stop_ids;
  w.generate.pad_id = p.tokenizer.pad_id();
  // The first prompts_per_step training records whose prompt leaves room for the completion, each
  // group_size times in a row, as a GRPO step's rows are.
  const data::PromptFormatter formatter(c.data, w.base_model);
  const std::vector<data::TaskRecord> records = data::read_dataset(data::train_file(c.data), c.data);
  const int64_t group = std::max<int64_t>(1, c.grpo.group_size);
  for (const data::TaskRecord& r : records) {
    if (int64_t(w.prompts.size()) >= o.sequences) break;
    const std::vector<int32_t> ids = train::prompt_ids(r, formatter, p.tokenizer);
    if (int64_t(ids.size()) + o.new_tokens > w.model.max_seq_len) continue;
    for (int64_t g = 0; g < group && int64_t(w.prompts.size()) < o.sequences; ++g) w.prompts.push_back(ids);
  }
  if (w.prompts.empty())
    throw UserError("bench generate --config " + opt.config + ": no training record of " +
                    data::train_file(c.data).string() + " leaves room for " + std::to_string(o.new_tokens) +
                    " new tokens within model.max_seq_len (" + std::to_string(w.model.max_seq_len) + ")");
  for (std::size_t i = 0; int64_t(w.prompts.size()) < o.sequences; ++i) w.prompts.push_back(w.prompts[i]);
  return w;
}

}  // namespace

namespace {

// Without --config: the default shape with random weights, or --model's checkpoint, and random
// prompts of --prompt-tokens ids generating --new-tokens each (no EOS).
void default_work(ConfigWork& w) {
  const GenerateBenchOptions& opt = w.options;
  if (opt.model.empty()) {    // the default model shape (configs use it for the embedded tasks)
    w.model.vocab_size = 32;  // about the size of the embedded tasks' character tokenizers
    w.master = torch::empty({model::llama_layout(w.model).total});
    model::init_llama_weights(model::llama_layout(w.model), w.model, w.master, 1);
  } else {
    // A real checkpoint: its shape and weights (prompts are random ids of its vocabulary).
    model::LoadedModel loaded = model::load_pretrained(opt.model);
    w.model = loaded.config;
    w.master = std::move(loaded.flat);
    w.base_model = opt.model;
  }
  if (opt.prompt_tokens + opt.new_tokens > w.model.max_seq_len) {
    if (!opt.model.empty())
      throw UserError("bench generate: --prompt-tokens + --new-tokens (" +
                      std::to_string(opt.prompt_tokens + opt.new_tokens) + ") exceed the model's context (" +
                      std::to_string(w.model.max_seq_len) + ")");
    w.model.max_seq_len = opt.prompt_tokens + opt.new_tokens;
  }
  torch::manual_seed(0);
  w.prompts.resize(std::size_t(opt.sequences));
  for (auto& p : w.prompts)
    for (int64_t i = 0; i < opt.prompt_tokens; ++i)
      p.push_back(int32_t(torch::randint(4, w.model.vocab_size, {1}).item<int64_t>()));
  w.generate.sampling.max_new_tokens = opt.new_tokens;
}

// One compute dtype's figures: tokens/s with the KV cache in each --decode mode (the first is the
// kv_* figure) and, unless --no-recompute, without it.
Json time_dtype(const model::LlamaModel& m, const ConfigWork& w,
                const std::vector<std::pair<std::string, rollout::DecodeMode>>& modes) {
  const GenerateBenchOptions& opt = w.options;
  rollout::GenerateOptions o = w.generate;
  o.use_cache = true;
  Json r;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    o.sampling.decode = modes[i].second;
    const std::vector<Run> runs = time_runs(m, w.prompts, o, opt.repeats);
    if (i == 0) r.update(throughput(runs, "kv"));
    r.update(throughput(runs, ("kv_" + modes[i].first).c_str()));
  }
  o.sampling.decode = modes[0].second;
  if (opt.recompute) {
    o.use_cache = false;
    // The baseline is ~30x slower: at most 2 timed runs of it.
    r.update(throughput(time_runs(m, w.prompts, o, std::min(opt.repeats, 2)), "recompute"));
    r["kv_speedup"] = r["kv_tokens_per_s"].get<double>() / r["recompute_tokens_per_s"].get<double>();
  }
  return r;
}

// The table of `result` (as --json prints it).
void print_generate_table(const Json& result, const ConfigWork& w, bool from_config, int64_t params,
                          const std::vector<std::pair<std::string, rollout::DecodeMode>>& modes, std::ostream& out) {
  const GenerateBenchOptions& opt = w.options;
  const rollout::GenerateOptions& o = w.generate;
  const int64_t prompt_max = result["prompt_tokens_max"].get<int64_t>();
  out << "unstuck bench generate: " << opt.sequences << " sequences x " << (from_config ? "up to " : "")
      << opt.new_tokens << " new tokens (prompt "
      << (from_config ? std::to_string(prompt_max) + " at most" : std::to_string(opt.prompt_tokens)) << "), model "
      << (w.base_model.empty() ? std::string("(default shape)") : w.base_model) << " dim " << w.model.dim << " x "
      << w.model.n_layers << " layers, " << params << " params, " << result["device"].get<std::string>() << ", "
      << result["threads"].get<int>() << " threads\n";
  if (from_config)
    out << "the work of " << opt.config << ": rollout temperature " << o.sampling.temperature << ", top_k "
        << o.sampling.top_k << ", top_p " << o.sampling.top_p << ", stops at " << o.stop_ids.size()
        << " token id(s); compute " << opt.dtype << " (precision.mode); tokens/s counts the tokens generated\n";
  out << "\n";
  out << std::left << std::setw(8) << "compute" << std::right << std::setw(30) << "KV cache tok/s (range)"
      << std::setw(30) << "recompute tok/s (range)" << std::setw(10) << "speedup"
      << "\n";
  const auto cell = [&](const Json& r, const std::string& p) {
    std::ostringstream c;
    c << std::fixed << std::setprecision(0) << r[p + "_tokens_per_s"].get<double>() << " ("
      << r[p + "_tokens_per_s_range"][0].get<double>() << "-" << r[p + "_tokens_per_s_range"][1].get<double>() << ")";
    return c.str();
  };
  for (const char* name : {"fp32", "bf16"}) {
    if (!result.contains(name)) continue;
    const Json& r = result[name];
    out << std::left << std::setw(8) << name << std::right << std::setw(30) << cell(r, "kv") << std::setw(30)
        << (opt.recompute ? cell(r, "recompute") : std::string("-"));
    if (opt.recompute) out << std::fixed << std::setprecision(2) << std::setw(10) << r["kv_speedup"].get<double>();
    out << "\n";
    for (std::size_t i = 1; i < modes.size(); ++i)
      out << std::left << std::setw(8) << "" << std::right << std::setw(30) << cell(r, "kv_" + modes[i].first)
          << "   (rollout.decode: " << modes[i].first << ")\n";
  }
  out << "\nKV cache column: rollout.decode " << modes[0].first << "; medians over " << opt.repeats
      << " runs after a warm-up" << (opt.recompute ? "; target: kv_speedup >= 5" : "") << "\n";
}

}  // namespace

void run_generate_bench(const GenerateBenchOptions& options, std::ostream& out) {
  const bool from_config = !options.config.empty();
  ConfigWork w = from_config ? config_work(options) : ConfigWork{options};
  const GenerateBenchOptions& opt = w.options;
  at::set_num_threads(resolve_threads(opt.threads));
  const torch::Device device(opt.device);
  if (!from_config) default_work(w);
  const model::ParamLayout layout = model::llama_layout(w.model);
  int64_t prompt_total = 0, prompt_max = 0;
  for (const auto& p : w.prompts) {
    prompt_total += int64_t(p.size());
    prompt_max = std::max<int64_t>(prompt_max, int64_t(p.size()));
  }
  Json result;
  if (from_config) {
    result["config"] = opt.config;
    const rollout::SamplingConfig& s = w.generate.sampling;
    result["sampling"] = {
        {"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"stop_ids", w.generate.stop_ids}};
  }
  result["sequences"] = opt.sequences;
  result["prompt_tokens"] =
      from_config ? Json(double(prompt_total) / double(w.prompts.size())) : Json(opt.prompt_tokens);
  result["prompt_tokens_max"] = prompt_max;
  result["new_tokens"] = opt.new_tokens;
  result["repeats"] = opt.repeats;
  result["model"] = {{"dim", w.model.dim},
                     {"n_layers", w.model.n_layers},
                     {"n_heads", w.model.n_heads},
                     {"vocab_size", w.model.vocab_size},
                     {"params", layout.total}};
  if (!w.base_model.empty()) result["model"]["path"] = w.base_model;
  result["device"] = device.str();
  result["threads"] = at::get_num_threads();
  std::vector<std::pair<std::string, rollout::DecodeMode>> modes;  // --decode: config name, mode
  for (rollout::DecodeMode m : enum_list<rollout::DecodeMode>(opt.decode, "--decode"))
    modes.emplace_back(config::enum_name(m), m);
  if (modes.empty()) throw UserError("bench generate --decode: no mode given");
  result["decode"] = opt.decode;
  for (auto [name, dtype] : {std::pair{"fp32", torch::kFloat32}, std::pair{"bf16", torch::kBFloat16}}) {
    if (opt.dtype != "both" && opt.dtype != name) continue;
    result[name] = time_dtype(model::LlamaModel(w.model, w.master.to(device, dtype)), w, modes);
  }
  if (opt.recompute && result.contains("fp32")) result["kv_speedup"] = result["fp32"]["kv_speedup"];
  if (opt.json)
    out << result.dump() << "\n";
  else
    print_generate_table(result, w, from_config, layout.total, modes, out);
}

}  // namespace unstuck::bench
