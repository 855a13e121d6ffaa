// Options of the precision component: which compute-weight format the FP32 master is rounded to,
// how the forward/backward computes with it, CPU threads, and dynamic loss scaling for FP16.
// Header-only; the generic config code (unstuck/config/config.h) loads and dumps it via visit().
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "unstuck/precision/rounding.h"

namespace unstuck::precision {

// Precision mode of a run (docs/PRECISION.md): compute-weight format and rounding of the master.
// fp8_rn / fp8_sr: the linear layers' weights are FP8 E4M3FN values with a power-of-two scale per
// output channel (unstuck/precision/fp8.h), held as BF16; the other tensors are BF16, rounded alike.
enum class PrecisionMode { fp32, fp16, bf16, bf16_sr, fp16_sr, fp8_rn, fp8_sr };

inline constexpr std::array<std::pair<PrecisionMode, const char*>, 7> kPrecisionModeNames{{
    {PrecisionMode::fp32, "fp32"},
    {PrecisionMode::fp16, "fp16"},
    {PrecisionMode::bf16, "bf16"},
    {PrecisionMode::bf16_sr, "bf16_sr"},
    {PrecisionMode::fp16_sr, "fp16_sr"},
    {PrecisionMode::fp8_rn, "fp8_rn"},
    {PrecisionMode::fp8_sr, "fp8_sr"},
}};
constexpr const auto& enum_names(PrecisionMode) { return kPrecisionModeNames; }

// Dtype the forward/backward computes in.
enum class ComputeMode {
  native,  // the weights' own format where the backend has fast kernels, else fp32
  fp32,    // fp32 on the rounded weights: isolates weight rounding from compute precision
  auto_,   // the faster of native and fp32 for this model on this CPU, timed once at start-up
           // (train::resolve_compute) and kept by checkpoints; native on CUDA
};

inline constexpr std::array<std::pair<ComputeMode, const char*>, 3> kComputeModeNames{{
    {ComputeMode::native, "native"},
    {ComputeMode::fp32, "fp32"},
    {ComputeMode::auto_, "auto"},
}};
constexpr const auto& enum_names(ComputeMode) { return kComputeModeNames; }

// Where the optimizer state lives and is updated (precision.offload).
enum class Offload {
  none,       // the FP32 master, the AdamW moments and the update on the run's device
  optimizer,  // the master and moments in host memory, updated there by the CPU fused AdamW (the same
              // bits: the rounding is device-independent); the gradient crosses to the host and the
              // compute weights back, a bounded slice at a time, once per optimizer step
};

inline constexpr std::array<std::pair<Offload, const char*>, 2> kOffloadNames{{
    {Offload::none, "none"},
    {Offload::optimizer, "optimizer"},
}};
constexpr const auto& enum_names(Offload) { return kOffloadNames; }

// Dynamic loss scaling (fp16 and fp16_sr only): the scale grows by growth_factor after
// growth_interval overflow-free steps and shrinks by backoff_factor after `hysteresis` overflows.
struct LossScaleConfig {
  double initial_scale = 65536.0;      // scale of the first step
  double growth_factor = 2.0;          // multiplier after growth_interval clean steps
  double backoff_factor = 0.5;         // multiplier after an overflow (once hysteresis is used up)
  int64_t growth_interval = 1000;      // overflow-free steps before the scale grows
  int hysteresis = 2;                  // overflowing steps tolerated before backing off
  double min_scale = 1.0;              // the scale never drops below this
  double max_scale = 16777216.0;       // the scale never grows above this (2^24)
  int64_t max_consecutive_skips = 50;  // stop training after this many skipped steps in a row; 0 = never

  template <class V>
  void visit(V& v) {
    v("initial_scale", initial_scale, "loss scale of the first step");
    v("growth_factor", growth_factor, "scale multiplier after growth_interval overflow-free steps");
    v("backoff_factor", backoff_factor, "scale multiplier when gradients overflow");
    v("growth_interval", growth_interval, "overflow-free steps before the scale grows");
    v("hysteresis", hysteresis, "overflowing steps tolerated before the scale backs off");
    v("min_scale", min_scale, "lower bound of the loss scale");
    v("max_scale", max_scale, "upper bound of the loss scale");
    v("max_consecutive_skips", max_consecutive_skips,
      "stop training with an error after this many optimizer steps in a row were skipped for "
      "non-finite gradients (any mode); 0 = never stop");
  }
};

struct PrecisionConfig {
  PrecisionMode mode = PrecisionMode::bf16_sr;  // compute-weight format and rounding
  ComputeMode compute = ComputeMode::native;    // dtype of the forward/backward
  int threads = 0;                              // CPU threads for our kernels; 0 = all usable CPUs
  LossScaleConfig loss_scale;                   // used by fp16 and fp16_sr only
  int analog_mantissa_bits = 0;                 // grid-scaled analog: BF16 with this many mantissa bits
  Offload offload = Offload::none;              // where the FP32 master and moments live

  template <class V>
  void visit(V& v) {
    v("mode", mode,
      "compute-weight format and rounding of the FP32 master (sr = stochastic rounding); fp8_rn / fp8_sr: "
      "the linear layers' weights in FP8 E4M3 with a power-of-two scale per output channel (embeddings, norms, "
      "biases and the head in BF16; on the CPU or a CUDA device, same bits)");
    v("compute", compute,
      "native: compute in the weights' format where the backend has fast kernels; "
      "fp32: compute in FP32 on the rounded weights; auto: whichever of the two a start-up probe "
      "of the model's matmul shapes times faster on this CPU (native on CUDA), recorded in run.json "
      "and kept on resume");
    v("threads", threads,
      "CPU threads for the rounding and optimizer kernels; 0 = all CPUs this process may use "
      "(affinity mask, cgroup CPU quota)");
    v("loss_scale", loss_scale, "dynamic loss scaling, used in fp16 and fp16_sr modes only");
    v("analog_mantissa_bits", analog_mantissa_bits,
      "0 = off; 1-6: a grid-scaled analog, not a real format (docs/PRECISION.md): modes bf16 and bf16_sr "
      "round to this many mantissa bits instead of BF16's 7 (a 2^(7 - bits) times coarser grid), and "
      "grpo.round_base_to_bf16 puts the base on that grid in every mode; CPU only");
    v("offload", offload,
      "none: the FP32 master and AdamW moments on the run's device; optimizer: both in host memory, updated "
      "there by the CPU fused AdamW (the same bits), the gradient copied to the host and the compute weights "
      "to the device a slice at a time each optimizer step (12 bytes per parameter off a GPU); full-parameter "
      "training in fp16, bf16, bf16_sr or fp16_sr at world size 1");
  }
};

// How the master is rounded into compute weights in `mode`.
constexpr RoundMode round_mode_for(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::fp32:
      return RoundMode::fp32;
    case PrecisionMode::fp16:
      return RoundMode::fp16_rn;
    case PrecisionMode::bf16:
      return RoundMode::bf16_rn;
    case PrecisionMode::bf16_sr:
      return RoundMode::bf16_sr;
    case PrecisionMode::fp16_sr:
      return RoundMode::fp16_sr;
    // The BF16 rounding of the tensors outside the FP8 channels (and the dtype of the compute weights).
    case PrecisionMode::fp8_rn:
      return RoundMode::bf16_rn;
    case PrecisionMode::fp8_sr:
      return RoundMode::bf16_sr;
  }
  return RoundMode::fp32;
}

// True for the FP8 modes (fp8_rn, fp8_sr).
constexpr bool is_fp8(PrecisionMode mode) { return mode == PrecisionMode::fp8_rn || mode == PrecisionMode::fp8_sr; }

// True when `mode` needs dynamic loss scaling (FP16's narrow range underflows small gradients).
constexpr bool uses_loss_scaling(PrecisionMode mode) {
  return mode == PrecisionMode::fp16 || mode == PrecisionMode::fp16_sr;
}

}  // namespace unstuck::precision
