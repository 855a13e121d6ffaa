// Pre-flight checks of a run config against the final model shape and this machine, before any
// large allocation or training step: cross-key limits (prompt + completion within model.max_seq_len)
// and an estimate of the run's memory, refused by name when it cannot fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "unstuck/config/run_config.h"

namespace unstuck {

// One part of a run's memory estimate: what it is, the config keys that size it, its bytes.
struct MemoryPart {
  std::string what;  // "rollout sampling uniforms and KV cache"
  std::string keys;  // "rollout.max_new_tokens (1000000000) x grpo.prompts_per_step (32) x ..."
  double bytes = 0;
  std::string knob;  // what to change when this part does not fit ("raise grpo.minibatches ..."); may be empty
};

// The largest buffers `command` ("sft", "train", "eval") allocates for `config` (model shape final),
// computed in double so absurd sizes (1e12 layers) do not overflow. Sorted, largest first.
// `longest_prompt` (train): tokens of the longest prompt the run keeps, which with
// rollout.max_new_tokens sizes its sequences; -1: model.max_seq_len - rollout.max_new_tokens (an
// upper bound: a real model's context, e.g. Qwen2.5's 32768, is far longer than its GRPO rows).
// Training logits cover the completions only and each group's prompt is computed once
// (LlamaModel::forward_completions).
std::vector<MemoryPart> estimate_memory(const RunConfig& config, const std::string& command,
                                        int64_t longest_prompt = -1);

// Physical memory of this machine in bytes (0 when unknown).
double physical_memory_bytes();
// Memory available to new allocations (MemAvailable; the physical memory when unknown).
double available_memory_bytes();
// One line of the total, then one line per part: "  1.5 GiB  frozen reference policy ...".
std::string memory_report(const std::vector<MemoryPart>& parts);

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
// Throws UserError when the parts' total times limit.ranks exceeds limit.bytes, naming the total,
// the limit and the largest part's keys and knob, e.g. "train: estimated memory 32.0 GiB exceeds this
// machine's 24.0 GiB; largest part: logits ..., 29.8 GiB, sized by grpo.prompts_per_step (...) x ...
// (raise grpo.minibatches or lower grpo.logprob_chunk_rows ...)".
void check_memory(const std::vector<MemoryPart>& parts, const MemoryLimit& limit, const std::string& command);

// Throws UserError when rollout.max_new_tokens leaves no room for a prompt within model.max_seq_len,
// or when the memory estimate does not fit this rank's device (check_memory): with `limit_bytes` < 0,
// the free memory of its GPU when run.device resolves to one (LOCAL_RANK's), else the available
// memory of this machine shared by its LOCAL_WORLD_SIZE ranks; otherwise `limit_bytes` of host memory.
void preflight(const RunConfig& config, const std::string& command, double limit_bytes = -1,
               int64_t longest_prompt = -1);

// The checks of preflight() that need no memory estimate (prompt room in the context); `unstuck
// train` runs these first and its memory check once the data gives the longest prompt.
void check_limits(const RunConfig& config);

}  // namespace unstuck
