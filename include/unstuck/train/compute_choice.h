// precision.compute resolved for one run: `auto` becomes native or fp32 by timing the model's own
// matmul shapes (forward and both backward products) in the weights' format and in FP32 on this
// CPU. The choice is made once, logged with its times, written to run.json and to every
// checkpoint, and a resume takes it from the checkpoint so it computes exactly as before.
#pragma once

#include <torch/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "unstuck/model/model_config.h"
#include "unstuck/precision/precision_config.h"

namespace unstuck::train {

// One timed comparison: seconds of one pass over the shapes in each dtype, the fastest of the
// interleaved repeats (transient load from other processes only ever adds time).
struct ComputeProbe {
  double native_s = 0;  // in the compute weights' dtype (bf16)
  double fp32_s = 0;    // in FP32 (the same rounded values, widened)
  int64_t rows = 0;     // activation rows of every product
  int repeats = 0;      // timed passes per dtype (interleaved, after one untimed warm-up each)
};

// fp32 is picked only when it is faster than native by more than this fraction: a near tie keeps
// the weights' own format (today's behaviour) rather than following timing noise.
inline constexpr double kAutoFp32Margin = 0.05;

struct ComputeChoice {
  precision::ComputeMode mode = precision::ComputeMode::native;  // native or fp32, never auto
  std::string reason;                                            // why (logged and in run.json)
  std::optional<ComputeProbe> probe;                             // when one was timed
  // {"configured", "resolved", "reason", and "probe": {native_ms, fp32_ms, rows, repeats}}.
  nlohmann::json to_json(precision::ComputeMode configured) const;
};

// Times, `repeats` times interleaved, every distinct weight product of one transformer block and
// the output head (out width capped at 4096 columns and scaled back) for `rows` activation rows:
// y = x W^T, dx = dy W and dW = dy^T x, in `dtype` and in FP32, summing layers x block + head.
ComputeProbe probe_compute(const model::ModelConfig& model, torch::ScalarType dtype, int64_t rows = 128,
                           int repeats = 5);

// fp32 when probe.fp32_s < (1 - kAutoFp32Margin) * probe.native_s, else native.
precision::ComputeMode pick_compute(const ComputeProbe& probe);

// The compute mode of a run. native / fp32: as configured. auto: `recorded` (the resolved mode a
// checkpoint being resumed holds) when given; native on CUDA, for FP32 weights and for FP16 weights
// on a CPU (which compute in FP32 either way); otherwise probe_compute() + pick_compute(). A
// configured native / fp32 that differs from `recorded` is used as configured, with a warning.
ComputeChoice resolve_compute(const model::ModelConfig& model, const precision::PrecisionConfig& precision,
                              torch::Device device, const std::optional<precision::ComputeMode>& recorded);

// `precision` with compute set to a resolved mode (what TrainableWeights takes).
precision::PrecisionConfig with_compute(precision::PrecisionConfig precision, precision::ComputeMode mode);

}  // namespace unstuck::train
