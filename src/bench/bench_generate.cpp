// `unstuck bench generate`: tokens/s of the rollout engine with the KV cache and with full
// recompute of the growing sequence at every step, on the same prompts and weights, FP32 and BF16;
// medians and ranges over repeated runs after a warm-up.
#include "bench/bench_generate.h"

#include "bench/bench_options.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/common/parallel.h"
#include "unstuck/config/config.h"
#include "unstuck/model/model_io.h"
#include "unstuck/model/llama.h"
#include "unstuck/rollout/sampler.h"

namespace unstuck::bench {
namespace {

using Json = nlohmann::ordered_json;

// Steady-state timing of one generation path: a warm-up run of the same shape (first-call set-up of
// libtorch's kernels and allocator is not measured; 4 tokens for the slow recompute path), then `repeats` timed runs. Returns the seconds
// of each run and checks every run generated all tokens.
std::vector<double> time_runs(const model::LlamaModel& m, const std::vector<std::vector<int32_t>>& prompts,
                              const rollout::GenerateOptions& o, int repeats) {
  rollout::GenerateOptions warm = o;
  if (!o.use_cache) warm.sampling.max_new_tokens = std::min<int64_t>(4, o.sampling.max_new_tokens);  // slow path
  (void)rollout::generate(m, prompts, warm, at::make_generator<at::CPUGeneratorImpl>(1));
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = rollout::generate(m, prompts, o, at::make_generator<at::CPUGeneratorImpl>(2 + r));
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (const auto& c : out)
      if (int64_t(c.tokens.size()) != o.sampling.max_new_tokens) throw std::logic_error("bench generate: short completion");
  }
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// {median tokens/s, [min, max] tokens/s, median seconds} of timed runs that made `tokens` tokens each.
Json throughput(const std::vector<double>& seconds, double tokens, const char* prefix) {
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  const std::string p(prefix);
  return {{p + "_tokens_per_s", tokens / median(seconds)},
          {p + "_tokens_per_s_range", {tokens / *hi, tokens / *lo}},
          {p + "_seconds", median(seconds)}};
}

}  // namespace

void run_generate_bench(const GenerateBenchOptions& opt, std::ostream& out) {
  at::set_num_threads(resolve_threads(opt.threads));
  const torch::Device device(opt.device);
  model::ModelConfig cfg;  // the default model shape (configs use it for the embedded tasks)
  torch::Tensor master;
  if (opt.model.empty()) {
    cfg.vocab_size = 32;  // about the size of the embedded tasks' character tokenizers
    master = torch::empty({model::llama_layout(cfg).total});
    model::init_llama_weights(model::llama_layout(cfg), cfg, master, 1);
  } else {
    // A real checkpoint: its shape and weights (prompts are random ids of its vocabulary).
    model::LoadedModel loaded = model::load_pretrained(opt.model);
    cfg = loaded.config;
    master = std::move(loaded.flat);
  }
  if (opt.prompt_tokens + opt.new_tokens > cfg.max_seq_len) {
    if (!opt.model.empty())
      throw UserError("bench generate: --prompt-tokens + --new-tokens (" + std::to_string(opt.prompt_tokens + opt.new_tokens) +
                      ") exceed the model's context (" + std::to_string(cfg.max_seq_len) + ")");
    cfg.max_seq_len = opt.prompt_tokens + opt.new_tokens;
  }
  const model::ParamLayout layout = model::llama_layout(cfg);

  torch::manual_seed(0);
  std::vector<std::vector<int32_t>> prompts(opt.sequences);
  for (auto& p : prompts)
    for (int64_t i = 0; i < opt.prompt_tokens; ++i) p.push_back(int32_t(torch::randint(4, cfg.vocab_size, {1}).item<int64_t>()));

  rollout::GenerateOptions o;
  o.sampling.max_new_tokens = opt.new_tokens;  // no EOS: every sequence generates all tokens
  const double tokens = double(opt.sequences * opt.new_tokens);
  Json result;
  result["sequences"] = opt.sequences;
  result["prompt_tokens"] = opt.prompt_tokens;
  result["new_tokens"] = opt.new_tokens;
  result["repeats"] = opt.repeats;
  result["model"] = {{"dim", cfg.dim}, {"n_layers", cfg.n_layers}, {"n_heads", cfg.n_heads},
                     {"vocab_size", cfg.vocab_size}, {"params", layout.total}};
  if (!opt.model.empty()) result["model"]["path"] = opt.model;
  result["device"] = device.str();
  result["threads"] = at::get_num_threads();
  std::vector<std::pair<std::string, rollout::DecodeMode>> modes;  // --decode: config name, mode
  for (rollout::DecodeMode m : enum_list<rollout::DecodeMode>(opt.decode, "--decode"))
    modes.emplace_back(config::enum_name(m), m);
  if (modes.empty()) throw UserError("bench generate --decode: no mode given");
  result["decode"] = opt.decode;
  for (auto [name, dtype] : {std::pair{"fp32", torch::kFloat32}, std::pair{"bf16", torch::kBFloat16}}) {
    if (opt.dtype != "both" && opt.dtype != name) continue;
    const model::LlamaModel m(cfg, master.to(device, dtype));
    o.use_cache = true;
    Json r;
    for (std::size_t i = 0; i < modes.size(); ++i) {
      o.sampling.decode = modes[i].second;
      const auto seconds = time_runs(m, prompts, o, opt.repeats);
      if (i == 0) r.update(throughput(seconds, tokens, "kv"));
      r.update(throughput(seconds, tokens, ("kv_" + modes[i].first).c_str()));
    }
    o.sampling.decode = modes[0].second;
    if (opt.recompute) {
      o.use_cache = false;
      // The baseline is ~30x slower: at most 2 timed runs of it.
      r.update(throughput(time_runs(m, prompts, o, std::min(opt.repeats, 2)), tokens, "recompute"));
      r["kv_speedup"] = r["kv_tokens_per_s"].get<double>() / r["recompute_tokens_per_s"].get<double>();
    }
    result[name] = r;
  }
  if (opt.recompute && result.contains("fp32")) result["kv_speedup"] = result["fp32"]["kv_speedup"];
  if (opt.json) {
    out << result.dump() << "\n";
    return;
  }
  out << "unstuck bench generate: " << opt.sequences << " sequences x " << opt.new_tokens
      << " new tokens (prompt " << opt.prompt_tokens << "), model "
      << (opt.model.empty() ? std::string("(default shape)") : opt.model) << " dim " << cfg.dim << " x "
      << cfg.n_layers << " layers, " << layout.total << " params, " << device.str() << ", "
      << result["threads"].get<int>() << " threads\n\n";
  out << std::left << std::setw(8) << "compute" << std::right << std::setw(30) << "KV cache tok/s (range)"
      << std::setw(30) << "recompute tok/s (range)" << std::setw(10) << "speedup" << "\n";
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
  out << "\nKV cache column: rollout.decode " << modes[0].first << "; medians over " << opt.repeats << " runs after a warm-up" << (opt.recompute ? "; target: kv_speedup >= 5" : "")
      << "\n";
}

}  // namespace unstuck::bench
