// precision.compute: auto. The probe times the model's weight products in the compute weights'
// dtype and in FP32 (interleaved, the fastest of a few passes each: the least disturbed by other
// load on the machine); the run keeps the choice for its
// lifetime and its checkpoints carry it to a resume.
#include "unstuck/train/compute_choice.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "unstuck/common/allocator.h"
#include "unstuck/config/config.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {
namespace {

using precision::ComputeMode;

// A weight matrix of the model (out x in) and how many times one forward multiplies by it.
struct Product {
  int64_t out, in;
  double count;
};

std::vector<Product> model_products(const model::ModelConfig& m) {
  const int64_t hd = m.head_dim(), q = m.n_heads * hd, kv = m.n_kv_heads * hd;
  const double L = double(m.n_layers);
  constexpr int64_t kHeadCap = 4096;  // the head is timed on this many output rows and scaled
  const int64_t head_rows = std::min(m.vocab_size, kHeadCap);
  std::vector<Product> p{
      {q, m.dim, L}, {kv, m.dim, 2 * L}, {m.dim, q, L}, {m.ffn_dim, m.dim, 2 * L}, {m.dim, m.ffn_dim, L}};
  if (head_rows > 0) p.push_back({head_rows, m.dim, double(m.vocab_size) / double(head_rows)});
  return p;
}

double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

nlohmann::json ComputeChoice::to_json(ComputeMode configured) const {
  nlohmann::json j{
      {"configured", config::enum_name(configured)}, {"resolved", config::enum_name(mode)}, {"reason", reason}};
  if (probe)
    j["probe"] = {{"native_ms", probe->native_s * 1e3},
                  {"fp32_ms", probe->fp32_s * 1e3},
                  {"rows", probe->rows},
                  {"repeats", probe->repeats},
                  {"fp32_margin", kAutoFp32Margin}};
  return j;
}

ComputeProbe probe_compute(const model::ModelConfig& model, torch::ScalarType dtype, int64_t rows, int repeats) {
  torch::NoGradGuard no_grad;
  const std::vector<Product> products = model_products(model);
  // Operands of each product: the same rounded values in `dtype` and widened to FP32.
  struct Operands {
    torch::Tensor w, x, dy;
  };
  std::vector<Operands> low, wide;
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0x5eed);
  for (const Product& p : products) {
    const auto randn = [&](int64_t a, int64_t b, double scale) {
      return (torch::randn({a, b}, gen, torch::kFloat32) * scale).to(dtype);
    };
    Operands o{randn(p.out, p.in, 0.02), randn(rows, p.in, 1.0), randn(rows, p.out, 1e-3)};
    wide.push_back({o.w.to(torch::kFloat32), o.x.to(torch::kFloat32), o.dy.to(torch::kFloat32)});
    low.push_back(std::move(o));
  }
  // One pass: forward (x W^T) and backward (dy W, dy^T x) of every product, weighted by its count.
  const auto pass = [&](const std::vector<Operands>& ops) {
    double total = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const torch::Tensor y = torch::linear(ops[i].x, ops[i].w);
      const torch::Tensor dx = torch::matmul(ops[i].dy, ops[i].w);
      const torch::Tensor dw = torch::matmul(ops[i].dy.t(), ops[i].x);
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * products[i].count;
    }
    return total;
  };
  pass(low);  // warm-up: kernels' first-call set-up, page faults of the outputs
  pass(wide);
  std::vector<double> t_low, t_wide;
  for (int r = 0; r < repeats; ++r) {  // interleaved, alternating which goes first
    if (r % 2 == 0) {
      t_low.push_back(pass(low));
      t_wide.push_back(pass(wide));
    } else {
      t_wide.push_back(pass(wide));
      t_low.push_back(pass(low));
    }
  }
  return {fastest(t_low), fastest(t_wide), rows, repeats};
}

ComputeMode pick_compute(const ComputeProbe& p) {
  return p.fp32_s < (1.0 - kAutoFp32Margin) * p.native_s ? ComputeMode::fp32 : ComputeMode::native;
}

ComputeChoice resolve_compute(const model::ModelConfig& model, const precision::PrecisionConfig& precision,
                              torch::Device device, const std::optional<ComputeMode>& recorded) {
  if (recorded && *recorded == ComputeMode::auto_)
    throw std::invalid_argument("resolve_compute: a recorded compute mode is native or fp32");
  const ComputeMode configured = precision.compute;
  ComputeChoice c;
  if (configured != ComputeMode::auto_) {
    c.mode = configured;
    c.reason = "configured";
    if (recorded && *recorded != configured)
      spdlog::warn(
          "precision.compute is {} but the checkpoint was trained with {}: the resumed steps compute "
          "differently from the run they continue",
          config::enum_name(configured), config::enum_name(*recorded));
    return c;
  }
  const torch::ScalarType weights = compute_dtype(precision::round_mode_for(precision.mode));
  if (recorded) {
    c.mode = *recorded;
    c.reason = "recorded in the checkpoint being resumed";
  } else if (device.is_cuda()) {
    c.reason = "CUDA device: native, no probe";
  } else if (weights != torch::kBFloat16) {
    c.reason = weights == torch::kFloat32 ? "FP32 weights compute in FP32"
                                          : "FP16 weights compute in FP32 on a CPU either way";
  } else {
    c.probe = probe_compute(model, weights);
    release_freed_memory();  // the probe's operands (~140 MiB at a 0.5B shape) are not the run's
    c.mode = pick_compute(*c.probe);
    c.reason = "probe: fp32 " + std::string(c.mode == ComputeMode::fp32 ? "is" : "is not") + " more than " +
               std::to_string(int(kAutoFp32Margin * 100)) + "% faster than bf16 on this CPU";
  }
  if (c.probe)
    spdlog::info(
        "precision.compute auto -> {} ({}): the model's matmuls, {} rows, forward + backward, best of "
        "{}: bf16 {:.1f} ms, fp32 {:.1f} ms",
        config::enum_name(c.mode), c.reason, c.probe->rows, c.probe->repeats, c.probe->native_s * 1e3,
        c.probe->fp32_s * 1e3);
  else
    spdlog::info("precision.compute auto -> {} ({})", config::enum_name(c.mode), c.reason);
  return c;
}

precision::PrecisionConfig with_compute(precision::PrecisionConfig precision, ComputeMode mode) {
  precision.compute = mode;
  return precision;
}

}  // namespace unstuck::train
