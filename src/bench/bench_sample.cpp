// `unstuck bench sample`: the time of one decode step's draw from language-model-like logits, the fused
// kernel (the CPU's sampler; its CUDA twin on a device) against libtorch's ops (logsumexp, subtract,
// exp, cumsum, searchsorted),
// interleaved round by round so a slow spell on a shared machine hits both; ops_over_kernel is the ratio.
#include "bench/bench_sample.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/common/parallel.h"
#include "unstuck/common/simd.h"
#include "unstuck/rollout/sampler.h"

namespace unstuck::bench {
namespace {

using Json = nlohmann::ordered_json;
using rollout::SamplerPath;

struct Setting {
  const char* name;
  rollout::SamplingConfig sampling;
};

std::vector<Setting> settings() {
  rollout::SamplingConfig plain, greedy, filtered;
  greedy.temperature = 0;
  filtered.temperature = 0.7;
  filtered.top_k = 50;
  filtered.top_p = 0.9;
  return {{"temperature 1", plain}, {"greedy", greedy}, {"T 0.7, top_k 50, top_p 0.9", filtered}};
}

// Best seconds of the kernel and of the ops over `repeats` interleaved rounds, after a warm-up.
std::pair<double, double> best_of(const torch::Tensor& logits, const torch::Tensor& u, const rollout::SamplingConfig& s,
                                  int repeats) {
  const bool cuda = logits.is_cuda();
  const auto time = [&](SamplerPath path) {
    if (cuda) torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const auto drawn = rollout::sample_logits(logits, s, u, path);
    if (cuda) torch::cuda::synchronize();
    (void)drawn;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const SamplerPath fused = SamplerPath::kernel;
  time(fused);
  time(SamplerPath::ops);
  double kernel = 1e30, ops = 1e30;
  for (int r = 0; r < repeats; ++r) {
    kernel = std::min(kernel, time(fused));
    ops = std::min(ops, time(SamplerPath::ops));
  }
  return {kernel, ops};
}

}  // namespace

void run_sample_bench(const SampleBenchOptions& o, std::ostream& out) {
  const int threads = resolve_threads(o.threads);
  torch::set_num_threads(threads);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  // Logits as a language model's: a wide normal body and a few peaked tokens per row.
  const torch::Device device(o.device);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw UserError("bench sample --device " + o.device + ": no CUDA device is available");
  torch::Tensor logits = torch::randn({o.rows, o.vocab}, gen) * 2.5;  // (rows, V)
  logits.index_put_({torch::arange(o.rows).unsqueeze(1), torch::randint(o.vocab, {o.rows, 4}, gen)}, 12.0);
  logits = logits.to(device);
  const torch::Tensor u = torch::rand({o.rows}, gen).to(device);
  Json result = {{"rows", o.rows},       {"vocab", o.vocab},       {"threads", threads},
                 {"repeats", o.repeats}, {"device", device.str()}, {"simd", simd_level_name(detect_simd_level())}};
  Json& runs = result["settings"] = Json::array();
  for (const Setting& s : settings()) {
    if (device.is_cuda() && (s.sampling.top_k > 0 || s.sampling.top_p < 1)) continue;  // ops only on a device
    const auto [kernel, ops] = best_of(logits, u, s.sampling, o.repeats);
    runs.push_back({{"setting", s.name},
                    {"kernel_ms", kernel * 1e3},
                    {"ops_ms", ops * 1e3},
                    {"ops_over_kernel", ops / kernel},
                    {"kernel_gb_per_s", double(o.rows * o.vocab) * 4 / kernel / 1e9}});
  }
  if (o.json) {
    out << result.dump() << "\n";
    return;
  }
  out << "bench sample: " << o.rows << " rows x " << o.vocab << " logits on " << device.str() << ", " << threads
      << " threads, best of " << o.repeats << "\n"
      << std::left << std::setw(30) << "setting" << std::right << std::setw(12) << "kernel ms" << std::setw(12)
      << "ops ms" << std::setw(10) << "ops/kern" << std::setw(12) << "kern GB/s"
      << "\n";
  for (const Json& r : runs)
    out << std::left << std::setw(30) << r["setting"].get<std::string>() << std::right << std::fixed
        << std::setprecision(3) << std::setw(12) << r["kernel_ms"].get<double>() << std::setw(12)
        << r["ops_ms"].get<double>() << std::setprecision(2) << std::setw(10) << r["ops_over_kernel"].get<double>()
        << std::setw(12) << r["kernel_gb_per_s"].get<double>() << "\n";
}

}  // namespace unstuck::bench
