// Fused AdamW over a range of the flat FP32 master: one pass reads master, gradient (times
// 1/loss_scale), m, v and the old compute weights, and writes master, m, v and the new rounded
// compute weights, counting per segment how many compute-weight elements changed (sticking).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision {

// AdamW hyper-parameters for one step.
struct AdamWHyper {
  double lr = 1e-5;           // learning rate of this step (after the schedule)
  double beta1 = 0.9;         // first-moment decay
  double beta2 = 0.999;       // second-moment decay
  double eps = 1e-8;          // added to sqrt(v_hat)
  double weight_decay = 0.0;  // decoupled decay, applied to segments whose `decay` is true
  int64_t step = 1;           // 1-based optimizer step, for the bias corrections
  double grad_scale = 1.0;    // the gradient is multiplied by this first (1 / loss_scale)
};

// A contiguous piece of the flat buffers (usually one tensor, clipped to this rank's shard).
struct Segment {
  uint64_t offset = 0;  // global element index in the unsharded flat buffer
  uint64_t size = 0;    // elements
  bool decay = true;    // apply weight decay
};

// Views of the flat buffers. Each pointer addresses global element `base`: element i of the flat
// buffer lives at ptr[i - base]. Segments must lie inside what the pointers cover.
struct AdamWBuffers {
  float* master = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;     // m
  float* exp_avg_sq = nullptr;  // v
  void* compute = nullptr;      // uint16_t bits (bf16/fp16) or float (fp32), per RoundMode
  uint64_t base = 0;
};

// Result of one fused step.
struct AdamWStepStats {
  std::vector<uint64_t> changed;  // per segment: compute-weight elements whose bits changed
  uint64_t changed_total = 0;
  uint64_t elements = 0;
};

AdamWScalars adamw_scalars(const AdamWHyper& hyper);

// Runs one AdamW step on every segment and rewrites their compute weights with `mode`. SR bits are
// keyed by (key.seed, key.step, global index). Throws std::invalid_argument on bad hyper-parameters.
AdamWStepStats fused_adamw_step(const AdamWBuffers& buffers, const std::vector<Segment>& segments,
                                const AdamWHyper& hyper, RoundMode mode, SrKey key, const KernelOptions& options = {});

}  // namespace unstuck::precision
