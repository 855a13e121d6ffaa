// Options of supervised fine-tuning (teacher forcing on the task's solution strings, loss on the
// completion only) that trains the base policy from scratch. The optimizer's lr, betas, weight
// decay and clipping come from the `optim` section, the weight format from `precision`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "unstuck/config/lr_schedule.h"

namespace unstuck::config {

// Format of the weights in a saved model directory.
enum class SaveDtype { fp32, bf16, fp16 };
inline constexpr std::array<std::pair<SaveDtype, const char*>, 3> kSaveDtypeNames{{
    {SaveDtype::fp32, "fp32"},
    {SaveDtype::bf16, "bf16"},
    {SaveDtype::fp16, "fp16"},
}};
constexpr const auto& enum_names(SaveDtype) { return kSaveDtypeNames; }

struct SftConfig {
  int64_t steps = 1200;                              // optimizer steps
  int64_t batch_size = 64;                           // sequences per step
  LrScheduleConfig lr{LrSchedule::cosine, 50, 0.1};  // sft.lr_schedule, sft.warmup_steps, sft.min_lr_ratio
  int64_t log_every = 25;                            // steps between progress lines
  int64_t eval_every = 300;                          // steps between greedy evaluations (and at the end); 0 = end only
  int64_t eval_samples = 256;                        // test records per evaluation (0 = all)
  std::string output;                                // model directory; empty = <run dir>/model
  SaveDtype save_dtype = SaveDtype::fp32;            // weights format of the saved model

  template <class V>
  void visit(V& v) {
    v("steps", steps, "optimizer steps");
    v("batch_size", batch_size, "sequences per optimizer step");
    lr.visit(v);
    v("log_every", log_every, "steps between progress lines");
    v("eval_every", eval_every, "steps between greedy test evaluations (and at the end); 0 = end only");
    v("eval_samples", eval_samples, "test records per evaluation; 0 = the whole test split");
    v("output", output, "model directory to write; empty: <run dir>/model");
    v("save_dtype", save_dtype,
      "weight format of the saved model; bf16 puts the base policy on the BF16 grid, as released "
      "checkpoints are");
  }
};

}  // namespace unstuck::config
