// A run's memory plan and its pre-flight checks, against the final model shape and this machine,
// before any large allocation or training step: cross-key limits (prompt + completion within
// model.max_seq_len) and the run's memory by part, refused by name (with the knobs that help) when it
// cannot fit. The run's plan (train/run_plan.h) makes it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "unstuck/config/device.h"
#include "unstuck/config/run_config.h"

namespace unstuck::train {

// One part of a run's memory plan: what it is, the config keys that size it, its bytes, and when it
// is alive: `phase` empty for what the whole run holds (weights, optimizer state, gradients, the
// process itself), else the phase it lives in and dies with ("rollout", "update", ...).
struct MemoryPart {
  std::string what;  // "rollout sampling uniforms and KV cache"
  std::string keys;  // "rollout.max_new_tokens (1000000000) x grpo.prompts_per_step (32) x ..."
  double bytes = 0;
  std::string knob;  // what to change when this part does not fit ("raise grpo.minibatches ..."); may be empty
  std::string
      phase;  // "" (held all run), "load", "rollout", "update", "log-probs", "optimizer", "checkpoint", "evaluation"
  bool host = false;  // in host memory even when the run computes on a GPU (precision.offload: optimizer)
  // Held by other processes (the reward workers): counted against the machine's memory, never in
  // this process's measured peak. Always also `host`.
  bool other_process = false;
};

// What the plan is built from beyond the config.
struct MemoryPlanInputs {
  // train: tokens of the longest prompt the run keeps, which with rollout.max_new_tokens sizes its
  // sequences; -1: model.max_seq_len - rollout.max_new_tokens (an upper bound: a real model's
  // context, e.g. Qwen2.5's 32768, is far longer than its GRPO rows).
  int64_t longest_prompt = -1;
  // Memory the process holds before the plan's parts (libtorch, the tokenizer, the data): measured
  // at start-up on the CPU; 0 on a GPU (device memory) or when unknown.
  double baseline_bytes = 0;
  // Bytes of the base model's weight files, mapped while they are converted (0: unknown, taken as
  // the FP32 size).
  double weight_file_bytes = 0;
  // The run computes on a GPU: its parts marked `host` are host memory, planned apart.
  bool gpu = false;
  // train: the reward workers the plan started and keeps for the run (reward.function, reward.command,
  // the code verifier's sandboxes, or the terms'), and their resident memory measured then.
  int64_t reward_workers = 0;
  double reward_worker_bytes = 0;
  // train: the tool workers the plan started (tools.functions, tools.environment), and their
  // resident memory measured then.
  int64_t tool_workers = 0;
  double tool_worker_bytes = 0;
  // The ranks sharing the optimizer state and the batch; 0: WORLD_SIZE from the environment.
  int64_t world_size = 0;
};

// A run's memory per rank: what it holds all along plus, at each moment, the parts of one phase.
// The peak is the largest phase's: baseline + held + that phase's parts, except "load", which
// comes before the optimizer state exists (baseline + other processes' parts + its own parts).
struct MemoryPlan {
  std::string command;
  double baseline = 0;
  std::vector<MemoryPart> parts;  // held first, then by phase; largest first within each
  bool gpu = false;               // MemoryPlanInputs::gpu: the `host` parts are not device memory

  // These (held, phases, peak) are the device's: on a GPU they leave out the `host` parts.
  double held() const;                                 // the parts with no phase
  double phase_bytes(const std::string& phase) const;  // the parts of `phase`
  double phase_peak(const std::string& phase) const;   // the process's memory while `phase` runs
  std::vector<std::string> phases() const;             // in order of first appearance
  double peak() const;
  std::string peak_phase() const;  // the phase that sets the peak ("" when none)
  // On a GPU: the peak of the `host` parts (those held all run plus the largest phase's: the load's
  // FP32 weights and mapped files); else 0.
  double host_bytes() const;
  double other_process_bytes() const;  // the `other_process` parts counted on this device (0 on a GPU)
  bool on_device(const MemoryPart& p) const { return !(gpu && p.host); }
};

// The plan of `command` ("sft", "train", "eval") for `config` (model shape final), computed in
// double so absurd sizes (1e12 layers) do not overflow. Training logits cover the completions only
// and each group's prompt is computed once (LlamaModel::forward_completions); the log-softmax of
// the fused head runs grpo.logprob_chunk_tokens positions at a time (algo::head_log_probs).
MemoryPlan plan_memory(const RunConfig& config, const std::string& command, const MemoryPlanInputs& in = {});

// Physical memory of this machine in bytes (0 when unknown).
double physical_memory_bytes();
// Memory available to new allocations (MemAvailable; the physical memory when unknown).
double available_memory_bytes();
// The plan as lines: the peak and the phase that sets it, then the held parts and each phase's
// ("  1.5 GiB  frozen reference policy ..."), each phase with its peak.
std::string memory_report(const MemoryPlan& plan);

// "1.5 GiB", "384.0 TiB".
std::string format_bytes(double bytes);

// What a run's memory estimate is compared with: `bytes` (0: unknown, no check), shared by `ranks`
// ranks, described by `where` in the error ("this machine's 24.0 GiB").
struct MemoryLimit {
  double bytes = 0;
  std::string where;
  int64_t ranks = 1;
};
// The host's `bytes`, shared by the LOCAL_WORLD_SIZE ranks started on this machine.
MemoryLimit host_memory_limit(double bytes);
// The free memory of CUDA device `device` now, for its one rank (unknown without CUDA).
MemoryLimit gpu_memory_limit(int device);
// On a GPU, the plan's `host` parts are also checked against this machine's available memory.
// Throws UserError when the plan's peak times limit.ranks exceeds limit.bytes, naming the peak, its
// phase, the limit, the largest part of that peak with its keys and knob, the knobs of the other
// large parts, and the whole breakdown (memory_report), e.g. "train: planned peak 32.0 GiB (update)
// exceeds this machine's 24.0 GiB; largest part: activations ..., 29.8 GiB, sized by ... (raise
// grpo.minibatches ...)".
// `knobs` (memory_knobs()) is called only when the plan does not fit; what it returns is listed in
// the error, each change with the peak it would give.
struct KnobPlan;
void check_memory(const MemoryPlan& plan, const MemoryLimit& limit,
                  const std::function<std::vector<KnobPlan>()>& knobs = {});

// One change to a run's config and the plan it would have.
struct KnobPlan {
  std::string change;          // e.g. "lora.rank=16", "WORLD_SIZE=16 (ranks on more machines)"
  double peak = 0;             // per rank, as MemoryPlan::peak()
  double host = 0;             // precision.offload: optimizer: the host memory it adds
  bool more_machines = false;  // needs more ranks than this machine runs
};
// The changes that lower a run's memory, each applied alone to a copy of `config` that still
// validates and planned again with `in`: lora.rank (full-parameter runs), precision.offload:
// optimizer (a GPU, 16-bit modes, one rank), model.activation_checkpointing, twice the
// grpo.minibatches (when the prompts still split into whole groups), half the
// grpo.logprob_chunk_tokens, and 2x / 8x the ranks; then every single-machine change at once.
std::vector<KnobPlan> memory_knobs(const RunConfig& config, const std::string& command, const MemoryPlanInputs& in);

// The limit of a resolved device (the GPU's free memory; on the CPU the machine's available memory,
// or the cgroup limit's free part when smaller).
MemoryLimit device_memory_limit(const ResolvedDevice& device);

// Throws UserError when rollout.max_new_tokens leaves no room for a prompt within model.max_seq_len.
// A run's plan (train/run_plan.h) runs these first, then checks plan_memory() against its device's
// limit (check_memory, device_memory_limit) once the data gives the longest prompt.
void check_limits(const RunConfig& config);

}  // namespace unstuck::train
