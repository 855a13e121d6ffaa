// `unstuck bench step`: runs a few GRPO steps of the default config in each precision mode
// (interleaved, best of `repeats`) and reports seconds per phase, rollout and training tokens/s, the
// model FLOP utilization (6 x params per trained token + 2 x params per generated token, over the
// step time, against the device's peak; trained tokens without the padding the forwards computed),
// the training phase's alone (training_mfu) and sr_overhead = bf16_sr / bf16.
#include "bench/bench_step.h"

#include "bench/bench_options.h"

#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/common/simd.h"
#include "unstuck/config/config.h"
#include "unstuck/model/llama.h"
#include "unstuck/model/model_io.h"
#include "unstuck/tokenizer/tokenizer.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/run_setup.h"
#include "unstuck/train/sft.h"

namespace unstuck::bench {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const char* kPhases[] = {"step_seconds", "rollout_seconds", "reward_seconds", "forward_backward_seconds",
                         "optimizer_seconds"};

// Averaged with the phases, for the throughput keys.
const char* kCounts[] = {"tokens_per_s", "response_len_mean", "train_tokens", "train_padding_tokens"};

// A CPU's FP32 peak: threads x clock x FLOPs per cycle (two FMA units of 8 lanes with AVX2, 16 with
// AVX-512). A rough estimate; --peak-tflops replaces it.
double estimated_cpu_peak_flops() {
  double mhz = 0;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line) && mhz == 0;)
    if (line.rfind("cpu MHz", 0) == 0) mhz = std::stod(line.substr(line.find(':') + 1));
  if (mhz <= 0) mhz = 2500;
  const double per_cycle = detect_simd_level() == SimdLevel::avx512 ? 64
                           : detect_simd_level() == SimdLevel::avx2 ? 32
                                                                    : 8;
  return double(at::get_num_threads()) * mhz * 1e6 * per_cycle;
}

// A randomly initialized policy of the config's model shape, for when no trained one exists: step
// time does not depend on what the weights know (completions then run to max_new_tokens).
fs::path random_policy(const RunConfig& cfg, const fs::path& dir) {
  RunConfig c = cfg;
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(train::tokenizer_file(c));
  c.model.vocab_size = tok.vocab_size();
  c.model.max_seq_len = 48;
  const model::ParamLayout layout = model::llama_layout(c.model);
  torch::Tensor flat = torch::empty({layout.total});
  model::init_llama_weights(layout, c.model, flat, 1);
  model::save_pretrained(dir, c.model, flat, io::DType::f32, {tok.bos_id(), tok.eos_id(), tok.pad_id()});
  fs::copy_file(train::tokenizer_file(c), dir / train::kTokenizerFile, fs::copy_options::overwrite_existing);
  return dir;
}

// Mean of each phase over the steps after the first (warm-up).
std::map<std::string, double> phase_means(const fs::path& run_dir) {
  std::map<std::string, double> sum;
  int64_t n = 0;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto m = nlohmann::json::parse(line);
    if (m["step"].get<int64_t>() == 1) continue;
    for (const char* p : kPhases) sum[p] += m[p].get<double>();
    for (const char* p : kCounts) sum[p] += m.value(p, 0.0);
    ++n;
  }
  for (auto& [k, v] : sum) v /= double(std::max<int64_t>(n, 1));
  return sum;
}

}  // namespace

void run_step_bench(const StepBenchOptions& opt, std::ostream& out) {
  RunConfig base = load_run_config(fs::exists(opt.config) ? fs::path(opt.config) : fs::path());
  const fs::path tmp = fs::temp_directory_path() / ("unstuck_bench_step_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  if (!opt.model.empty()) base.grpo.base_model = opt.model;
  if (!fs::exists(fs::path(base.grpo.base_model) / "config.json"))
    base.grpo.base_model = random_policy(base, tmp / "random_policy").string();
  base.run.output_dir = (tmp / "runs").string();
  base.run.log_level = LogLevel::warn;
  base.grpo.steps = std::max<int64_t>(2, opt.steps);
  base.grpo.eval_every = 0;
  base.grpo.eval_samples = 1;
  base.grpo.checkpoint_every = 0;
  base.run.device = enum_of<DeviceKind>(opt.device, "--device");
  std::vector<precision::PrecisionMode> modes = {precision::PrecisionMode::fp32, precision::PrecisionMode::fp16,
                                                 precision::PrecisionMode::bf16, precision::PrecisionMode::bf16_sr,
                                                 precision::PrecisionMode::fp16_sr};
  if (!opt.modes.empty()) modes = enum_list<precision::PrecisionMode>(opt.modes, "--modes");
  std::map<std::string, std::map<std::string, double>> best;
  double params = 0;
  std::string device;
  for (int r = 0; r < opt.repeats; ++r)
    for (auto mode : modes) {
      RunConfig c = base;
      c.precision.mode = mode;
      c.run.name = std::string(config::enum_name(mode)) + "_" + std::to_string(r);
      const fs::path run_dir = train::run_grpo(c).run_dir;
      if (params == 0) {
        const nlohmann::json run = nlohmann::json::parse(std::ifstream(run_dir / "run.json"));
        device = run.value("device", "cpu");
        params = double(model::llama_layout(model::load_pretrained(c.grpo.base_model).config).total);
      }
      const auto means = phase_means(run_dir);
      auto& b = best[config::enum_name(mode)];
      if (b.empty() || means.at("step_seconds") < b.at("step_seconds")) b = means;
    }
  fs::remove_all(tmp);

  Json result;
  result["config"] = opt.config;
  result["base_model"] = opt.model.empty() && base.grpo.base_model.find("random_policy") != std::string::npos
                             ? "random init"
                             : base.grpo.base_model;
  result["prompts_per_step"] = base.grpo.prompts_per_step;
  result["group_size"] = base.grpo.group_size;
  result["measured_steps"] = base.grpo.steps - 1;
  result["repeats"] = opt.repeats;
  const bool cuda = device.rfind("cuda", 0) == 0;
  if (cuda && opt.peak_tflops <= 0)
    throw UserError("bench step --device cuda: pass the GPU's peak as --peak-tflops (dense, in the compute dtype)");
  const double peak = opt.peak_tflops > 0 ? opt.peak_tflops * 1e12 : estimated_cpu_peak_flops();
  result["device"] = device;
  result["params"] = params;
  result["peak_tflops"] = peak / 1e12;
  result["peak_source"] = opt.peak_tflops > 0 ? "--peak-tflops" : "estimated: threads x clock x FP32 FMA width";
  for (auto mode : modes) {
    auto& b = best[config::enum_name(mode)];
    const double N = double(base.grpo.prompts_per_step * base.grpo.group_size), generated = b["response_len_mean"] * N;
    b["rollout_tokens_per_s"] = b["tokens_per_s"];
    // Useful tokens only: the positions the training forwards computed less their padding.
    const double useful = b["train_tokens"] - b["train_padding_tokens"];
    b["training_tokens_per_s"] = useful / std::max(b["forward_backward_seconds"], 1e-12);
    b["model_flop_utilization"] =
        (6 * params * useful + 2 * params * generated) / std::max(b["step_seconds"], 1e-12) / peak;
    b["training_mfu"] = 6 * params * useful / std::max(b["forward_backward_seconds"], 1e-12) / peak;
    result[config::enum_name(mode)] = b;
  }
  if (best.count("bf16_sr") && best.count("bf16")) {
    result["sr_overhead"] = best["bf16_sr"]["step_seconds"] / best["bf16"]["step_seconds"];
    result["sr_optimizer_overhead"] = best["bf16_sr"]["optimizer_seconds"] / best["bf16"]["optimizer_seconds"];
  }
  if (opt.json) {
    out << result.dump() << "\n";
    return;
  }
  out << "unstuck bench step: " << base.grpo.prompts_per_step << " prompts x " << base.grpo.group_size
      << " samples per step, mean of " << base.grpo.steps - 1 << " steps after a warm-up, best of " << opt.repeats
      << " (seconds)\n\n"
      << std::left << std::setw(9) << "mode" << std::right;
  for (const char* h : {"step", "rollout", "reward", "fwd+bwd", "optim+round", "rollout tok/s", "train tok/s", "MFU"})
    out << std::setw(13) << h;
  out << "\n";
  for (auto mode : modes) {
    auto& b = best[config::enum_name(mode)];
    out << std::left << std::setw(9) << config::enum_name(mode) << std::right << std::fixed << std::setprecision(3);
    for (const char* p : kPhases) out << std::setw(13) << b[p];
    out << std::setprecision(0) << std::setw(13) << b["rollout_tokens_per_s"] << std::setw(13)
        << b["training_tokens_per_s"] << std::setprecision(4) << std::setw(13) << b["model_flop_utilization"] << "\n";
  }
  out << "\ndevice " << device << ", " << params << " params, peak " << std::setprecision(3) << peak / 1e12
      << " TFLOP/s (" << result["peak_source"].get<std::string>() << ")\n";
  if (!result.contains("sr_overhead")) return;
  out << "\nsr_overhead (bf16_sr / bf16 step time) " << std::setprecision(3) << result["sr_overhead"].get<double>()
      << " (target <= 1.02); optimizer+rounding phase alone " << result["sr_optimizer_overhead"].get<double>() << "\n";
}

}  // namespace unstuck::bench
