// Rollout engine: batched sampling from the policy with a KV cache (or full recompute, for
// benchmarks and checks). Temperature, top-k, top-p, max new tokens, stop at EOS; keeps each
// sampled token's log-probability and each sequence's finish reason.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "unstuck/model/llama.h"
#include "unstuck/rollout/sampling_config.h"

namespace unstuck::rollout {

enum class FinishReason { eos, length };
inline constexpr std::array<std::pair<FinishReason, const char*>, 2> kFinishReasonNames{{
    {FinishReason::eos, "eos"},
    {FinishReason::length, "length"},
}};
constexpr const auto& enum_names(FinishReason) { return kFinishReasonNames; }

struct Completion {
  std::vector<int32_t> tokens;   // generated tokens, the EOS included when it was sampled
  std::vector<float> logprobs;   // log-prob of each generated token under the sampling
                                 // distribution (temperature applied, before top-k/top-p)
  FinishReason finish = FinishReason::length;
};

struct GenerateOptions {
  SamplingConfig sampling;
  int32_t eos_id = -1;     // stop token (< 0: none)
  int32_t pad_id = 0;      // fills left padding; never attended
  bool use_cache = true;   // false: recompute the whole sequence every step (reference path)
  // Optional (B, max_new_tokens) uniforms in [0, 1): token t of row b is drawn by inverse CDF with
  // uniforms[b][t] instead of from the generator, so a row's sample does not depend on which other
  // rows share its batch (data-parallel ranks draw the global batch's uniforms and take their rows).
  torch::Tensor uniforms;
};

// Samples one completion per prompt. Prompts may differ in length (they are left padded).
// Deterministic for a given generator state.
std::vector<Completion> generate(const model::LlamaModel& model,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& options, at::Generator generator);

// Throws UserError naming rollout.<field> for out-of-range sampling options.
void validate_sampling(const SamplingConfig& config);

}  // namespace unstuck::rollout
