// `unstuck bench precision`: bandwidth of the rounding kernels and the fused AdamW on a buffer far out
// of cache, against baselines timed in the same run: a plain copy, libtorch's FP32 -> BF16 cast, the
// same stochastic rounding written as separate libtorch ops, and libtorch's AdamW + a rounding pass.
#include "bench/bench_precision.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <vector>

#include "unstuck/common/parallel.h"
#include "unstuck/precision/fp8.h"
#include "unstuck/precision/fused_adamw.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::bench {
namespace {

using precision::RoundMode;
using Json = nlohmann::ordered_json;

// Best wall time of each candidate over `repeats` rounds, after one warm-up round. Candidates run
// interleaved (one of each per round), so a slow spell on a shared machine hits them alike and the
// ratios stay meaningful.
std::vector<double> best_seconds(int repeats, const std::vector<std::function<void()>>& candidates) {
  for (const auto& fn : candidates) fn();
  std::vector<double> best(candidates.size(), 1e30);
  for (int r = 0; r < repeats; ++r)
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      const auto t0 = std::chrono::steady_clock::now();
      candidates[c]();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[c] = std::min(best[c], s);
    }
  return best;
}

struct Buffers {
  explicit Buffers(std::size_t n) {
    torch::manual_seed(0);
    master = torch::randn({int64_t(n)}) * 0.02;  // weight-like magnitudes
    grad = torch::randn({int64_t(n)}) * 1e-3;
    copy_out = torch::empty({int64_t(n)});
    out16 = torch::empty({int64_t(n)}, torch::kBFloat16);
    m = torch::zeros({int64_t(n)});
    v = torch::zeros({int64_t(n)});
  }
  torch::Tensor master, grad, copy_out, out16, m, v;
};

// The stochastic rounding the way Python frameworks write it: random integers, integer add to the
// FP32 bits, mask off the low half, reinterpret the high half as BF16. Separate ops, each a pass.
torch::Tensor unfused_sr_bf16(const torch::Tensor& master) {
  const torch::Tensor bits = master.view(torch::kInt32);
  const torch::Tensor noise = torch::randint(0, 65536, master.sizes(), torch::kInt32);
  const torch::Tensor rounded = (bits + noise).bitwise_and(int64_t(int32_t(0xFFFF0000u)));
  return rounded.bitwise_right_shift(16).to(torch::kInt16).view(torch::kBFloat16);
}

Json measure(Buffers& b, std::size_t n, int threads, int repeats) {
  at::set_num_threads(threads);
  const precision::KernelOptions kopt{threads, detect_simd_level()};
  const float* master = b.master.data_ptr<float>();
  void* out16 = b.out16.data_ptr();
  const precision::SrKey key{1234, 1};
  const double gb = 1e-9;

  auto round_with = [&](RoundMode mode) {
    return [&, mode] { precision::materialize(master, out16, n, mode, key, 0, kopt); };
  };
  auto copy = [&] {
    float* dst = b.copy_out.data_ptr<float>();
    parallel_chunks(n, threads, 1024, [&](std::size_t i, std::size_t j, int) {
      std::memcpy(dst + i, master + i, (j - i) * sizeof(float));
    });
  };
  const std::vector<double> t = best_seconds(
      repeats, {copy, round_with(RoundMode::bf16_sr), round_with(RoundMode::bf16_rn), round_with(RoundMode::fp16_sr),
                [&] { b.out16.copy_(b.master); }, [&] { (void)unfused_sr_bf16(b.master); }});
  const double copy_s = t[0], sr_bf16_s = t[1], rn_bf16_s = t[2], sr_fp16_s = t[3];
  const double torch_rn_s = t[4], unfused_s = t[5];

  // FP8 (precision.mode fp8_*): the buffer as one matrix with rows of 896 (Qwen2.5-0.5B's width): the
  // channel maxima, then the rounding by the channels' exponents.
  const uint64_t cols = 896;
  const std::vector<precision::Fp8Matrix> fp8{{0, uint64_t(n) / cols, cols, 0}};
  std::vector<float> amax(precision::fp8_channel_count(fp8), 0.0f);
  std::vector<int32_t> exponent(amax.size(), 0);
  precision::fp8_channel_amax(master, n, 0, fp8, amax.data(), kopt);
  for (std::size_t r = 0; r < amax.size(); ++r) exponent[r] = precision::fp8_scale_exponent(amax[r]);
  auto fp8_with = [&](bool sr) {
    return [&, sr] {
      precision::materialize_fp8(master, static_cast<uint16_t*>(out16), n, 0, fp8, exponent.data(), sr, key, kopt);
    };
  };
  const std::vector<double> t8 = best_seconds(
      repeats,
      {fp8_with(false), fp8_with(true), [&] { precision::fp8_channel_amax(master, n, 0, fp8, amax.data(), kopt); }});

  // Fused AdamW + SR vs libtorch's AdamW step followed by our (fast) SR pass.
  precision::AdamWHyper hyper;
  hyper.lr = 1e-5;
  hyper.weight_decay = 0.01;
  const std::vector<precision::Segment> segments{{0, n, true}};
  precision::AdamWBuffers fb{
      b.master.data_ptr<float>(), b.grad.data_ptr<float>(), b.m.data_ptr<float>(), b.v.data_ptr<float>(), out16, 0};
  torch::Tensor param = b.master.clone().set_requires_grad(true);
  param.mutable_grad() = b.grad;
  torch::optim::AdamW torch_adamw({param}, torch::optim::AdamWOptions(hyper.lr).weight_decay(0.01));
  const std::vector<double> ta = best_seconds(
      repeats, {[&] { (void)precision::fused_adamw_step(fb, segments, hyper, RoundMode::bf16_sr, key, kopt); },
                [&] {
                  torch_adamw.step();
                  torch::NoGradGuard no_grad;
                  precision::materialize(param.data_ptr<float>(), out16, n, RoundMode::bf16_sr, key, 0, kopt);
                }});
  const double fused_s = ta[0], unfused_adamw_s = ta[1];

  const double bytes6 = 6.0 * double(n);
  Json j;
  j["copy_gbps"] = 8.0 * double(n) / copy_s * gb;
  j["sr_bf16_gbps"] = bytes6 / sr_bf16_s * gb;
  j["rn_bf16_gbps"] = bytes6 / rn_bf16_s * gb;
  j["sr_fp16_gbps"] = bytes6 / sr_fp16_s * gb;
  j["torch_rn_bf16_gbps"] = bytes6 / torch_rn_s * gb;
  j["unfused_sr_bf16_gbps"] = bytes6 / unfused_s * gb;
  j["rn_fp8_gbps"] = bytes6 / t8[0] * gb;
  j["sr_fp8_gbps"] = bytes6 / t8[1] * gb;
  j["fp8_amax_gbps"] = 4.0 * double(n) / t8[2] * gb;
  j["sr_fp8_vs_sr_bf16"] = sr_bf16_s / t8[1];
  j["adamw_fused_ms"] = fused_s * 1e3;
  j["adamw_unfused_ms"] = unfused_adamw_s * 1e3;
  j["sr_vs_copy"] = j["sr_bf16_gbps"].get<double>() / j["copy_gbps"].get<double>();
  j["sr_vs_torch_rn"] = torch_rn_s / sr_bf16_s;
  j["sr_vs_unfused"] = unfused_s / sr_bf16_s;
  j["adamw_fused_vs_unfused"] = unfused_adamw_s / fused_s;
  return j;
}

void print_table(const Json& result, std::ostream& out) {
  out << "unstuck bench precision: " << result["elements"].get<std::size_t>() << " FP32 elements, SIMD "
      << result["simd"].get<std::string>() << ", best of " << result["repeats"].get<int>()
      << " (GB/s count bytes read + written)\n\n";
  out << std::left << std::setw(26) << "metric" << std::right << std::setw(14) << "1 thread" << std::setw(14)
      << (std::to_string(result["threads"].get<int>()) + " threads") << "\n";
  const Json& one = result["at_1_thread"];
  const Json& all = result["at_all_threads"];
  for (auto it = one.begin(); it != one.end(); ++it) {
    out << std::left << std::setw(26) << it.key() << std::right << std::fixed << std::setprecision(2) << std::setw(14)
        << it.value().get<double>() << std::setw(14) << all[it.key()].get<double>() << "\n";
  }
  out << "\ntargets (all threads): sr_vs_copy >= 0.8, sr_vs_torch_rn >= 1.0, sr_vs_unfused >= 4, "
         "adamw_fused_vs_unfused >= 2.5\n";
}

}  // namespace

void run_precision_bench(const PrecisionBenchOptions& options, std::ostream& out) {
  const std::size_t n = options.elements;
  const int all = resolve_threads(options.threads);
  Buffers buffers(n);
  Json result;
  result["elements"] = n;
  result["simd"] = simd_level_name(detect_simd_level());
  result["repeats"] = options.repeats;
  result["threads"] = all;
  const Json one = measure(buffers, n, 1, options.repeats);
  const Json many = measure(buffers, n, all, options.repeats);
  for (auto it = many.begin(); it != many.end(); ++it) result[it.key()] = it.value();
  result["at_1_thread"] = one;
  result["at_all_threads"] = many;
  if (options.json)
    out << result.dump() << "\n";
  else
    print_table(result, out);
}

}  // namespace unstuck::bench
