// `unstuck bench generate`: tokens/s of the rollout engine with the KV cache and with full
// recompute of the growing sequence at every step, on the same prompts and weights, FP32 and BF16.
#include "bench/bench_generate.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <iomanip>
#include <nlohmann/json.hpp>

#include "unstuck/common/parallel.h"
#include "unstuck/model/llama.h"
#include "unstuck/rollout/sampler.h"

namespace unstuck::bench {
namespace {

using Json = nlohmann::ordered_json;

// Tokens generated per second, after a short warm-up run of the same path (first-call set-up of
// libtorch's kernels is not part of the measurement).
double tokens_per_second(const model::LlamaModel& m, const std::vector<std::vector<int32_t>>& prompts,
                         const rollout::GenerateOptions& o) {
  rollout::GenerateOptions warm = o;
  warm.sampling.max_new_tokens = std::min<int64_t>(4, o.sampling.max_new_tokens);
  (void)rollout::generate(m, prompts, warm, at::make_generator<at::CPUGeneratorImpl>(1));
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = rollout::generate(m, prompts, o, at::make_generator<at::CPUGeneratorImpl>(1));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t tokens = 0;
  for (const auto& c : out) tokens += int64_t(c.tokens.size());
  return double(tokens) / s;
}

}  // namespace

void run_generate_bench(const GenerateBenchOptions& opt, std::ostream& out) {
  at::set_num_threads(resolve_threads(opt.threads));
  model::ModelConfig cfg;  // the default model shape (configs use it for the embedded tasks)
  cfg.vocab_size = 32;     // about the size of the embedded tasks' character tokenizers
  cfg.max_seq_len = std::max(cfg.max_seq_len, opt.prompt_tokens + opt.new_tokens);
  const model::ParamLayout layout = model::llama_layout(cfg);
  torch::Tensor master = torch::empty({layout.total});
  model::init_llama_weights(layout, cfg, master, 1);

  torch::manual_seed(0);
  std::vector<std::vector<int32_t>> prompts(opt.sequences);
  for (auto& p : prompts)
    for (int64_t i = 0; i < opt.prompt_tokens; ++i) p.push_back(int32_t(torch::randint(4, cfg.vocab_size, {1}).item<int64_t>()));

  rollout::GenerateOptions o;
  o.sampling.max_new_tokens = opt.new_tokens;  // no EOS: every sequence generates all tokens
  Json result;
  result["sequences"] = opt.sequences;
  result["prompt_tokens"] = opt.prompt_tokens;
  result["new_tokens"] = opt.new_tokens;
  result["model"] = {{"dim", cfg.dim}, {"n_layers", cfg.n_layers}, {"n_heads", cfg.n_heads},
                     {"vocab_size", cfg.vocab_size}, {"params", layout.total}};
  result["threads"] = at::get_num_threads();
  for (auto [name, dtype] : {std::pair{"fp32", torch::kFloat32}, std::pair{"bf16", torch::kBFloat16}}) {
    const model::LlamaModel m(cfg, master.to(dtype));
    o.use_cache = true;
    const double cached = tokens_per_second(m, prompts, o);
    o.use_cache = false;
    const double full = tokens_per_second(m, prompts, o);
    result[name] = {{"kv_tokens_per_s", cached}, {"recompute_tokens_per_s", full},
                    {"kv_speedup", cached / full}};
  }
  result["kv_speedup"] = result["fp32"]["kv_speedup"];
  if (opt.json) {
    out << result.dump() << "\n";
    return;
  }
  out << "unstuck bench generate: " << opt.sequences << " sequences x " << opt.new_tokens
      << " new tokens (prompt " << opt.prompt_tokens << "), model dim " << cfg.dim << " x "
      << cfg.n_layers << " layers, " << result["threads"].get<int>() << " threads\n\n";
  out << std::left << std::setw(8) << "compute" << std::right << std::setw(18) << "KV cache tok/s"
      << std::setw(18) << "recompute tok/s" << std::setw(12) << "speedup" << "\n";
  for (const char* name : {"fp32", "bf16"}) {
    const Json& r = result[name];
    out << std::left << std::setw(8) << name << std::right << std::fixed << std::setprecision(0)
        << std::setw(18) << r["kv_tokens_per_s"].get<double>() << std::setw(18)
        << r["recompute_tokens_per_s"].get<double>() << std::setprecision(2) << std::setw(12)
        << r["kv_speedup"].get<double>() << "\n";
  }
  out << "\ntarget: kv_speedup >= 5\n";
}

}  // namespace unstuck::bench
