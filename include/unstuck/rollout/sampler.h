// Rollout engine: batched sampling from the policy with a KV cache (or full recompute, for
// benchmarks and checks) on the weights' device. Temperature, top-k, top-p, max new tokens, stop at
// any of a set of stop tokens (finished rows leave the decode batch); keeps each sampled token's
// log-probability and each sequence's finish reason. Tokens are drawn by inverse CDF from
// counter-based uniforms.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "unstuck/model/llama.h"
#include "unstuck/rollout/sampling_config.h"

namespace unstuck::rollout {

enum class FinishReason { eos, length };  // eos: a stop token was sampled
inline constexpr std::array<std::pair<FinishReason, const char*>, 2> kFinishReasonNames{{
    {FinishReason::eos, "eos"},
    {FinishReason::length, "length"},
}};
constexpr const auto& enum_names(FinishReason) { return kFinishReasonNames; }

struct Completion {
  std::vector<int32_t> tokens;  // generated tokens, the stop token included when one was sampled
  std::vector<float> logprobs;  // log-prob of each generated token under the sampling
                                // distribution (temperature applied, before top-k/top-p); 0 for a tool's
  FinishReason finish = FinishReason::length;
  // Per token: 1 where a tool's result (and the template's framing of it) was appended, not sampled
  // (rollout/tools.h). Empty: every token is the policy's.
  std::vector<uint8_t> from_tool;
};

// The keys and values of rows' contexts, kept from one generate() call for the next of a multi-turn
// rollout (GenerateOptions::contexts): a tool round continues each row from its cache, computing
// only the tokens appended since (the row's last sampled token and the tool's result).
struct KeptContexts {
  model::KVCache cache;                      // one row per context, its real slots first (empty: none)
  std::vector<int64_t> ids;                  // the row id (GenerateOptions::row_ids) of each cache row
  std::vector<std::vector<int32_t>> tokens;  // the context each cache row holds
  std::vector<int64_t> computed;             // per prompt of the last call: its tokens that call computed (not kept)
};

// How far a generate() call is, after a decode step (for progress output).
struct GenerateProgress {
  int64_t tokens_done = 0;  // decode steps done (each row's completion has at most this many tokens)
  int64_t max_tokens = 0;   // max_new_tokens
  int64_t rows = 0;         // rows of the call
  int64_t finished = 0;     // rows known to have sampled a stop token (read every stop_check_every steps)
  int64_t sampled = 0;      // tokens sampled so far over the rows still decoding
};

struct GenerateOptions {
  SamplingConfig sampling;
  // Tokens that end a completion (the one sampled is kept as its last token). Empty: completions
  // end at max_new_tokens only. Real models stop at several (Llama 3 Instruct: <|eot_id|>,
  // <|end_of_text|>, <|eom_id|>); see train::stop_token_ids().
  std::vector<int32_t> stop_ids;
  int32_t pad_id = 0;         // fills left padding; never attended
  bool use_cache = true;      // false: recompute the whole sequence every step (reference path)
  bool drop_finished = true;  // rows that sampled a stop token leave the decode batch (KV cache rows compacted)
  // Consecutive rows with the same prompt (a GRPO group) share one prefill: the distinct prompts
  // fill a cache once, copied to their rows before decoding. false: every row is prefilled.
  bool share_prompts = true;
  // Decode steps between the host's reads of the finished-row count (the only host sync of the
  // decode loop; it decides the early stop and the dropping of finished rows). 0: every step on a
  // CPU, where reading it costs nothing, and every 8th on CUDA, so the GPU is not stalled per token.
  // The tokens do not depend on it (rows finished in between keep sampling, unread).
  int64_t stop_check_every = 0;
  // Optional (B, >= max_new_tokens) uniforms in [0, 1): token t of row b is the first whose
  // cumulative probability exceeds uniforms[b][t] (inverse CDF), so a row's sample does not depend on
  // which other rows share its batch. Data-parallel GRPO passes sampling_uniforms() of its global
  // rows. Undefined: the uniforms of rows 0..B-1 at step 0 under a seed drawn from the generator.
  torch::Tensor uniforms;
  // Per-row completion limits (empty: max_new_tokens for every row): row b's completion ends after
  // row_max_new[b] (1..max_new_tokens) tokens, finish `length`. Each row's prompt + its own limit
  // must fit model.max_seq_len; the longest prompt + max_new_tokens need not (but without the cache).
  std::vector<int64_t> row_max_new;
  // Multi-turn rollouts (tools): with `contexts` set and the cache in use, a prompt whose row id
  // (row_ids[b]; empty: b) has a context kept there that the prompt extends is prefilled from the
  // kept keys and values: only its tokens after that context are computed. Every row's context of
  // this call (its prompt and its completion but the last token) replaces what `contexts` held.
  std::shared_ptr<KeptContexts> contexts;
  std::vector<int64_t> row_ids;
  // Called after every decode step (empty: never). Costs no host synchronization of its own: the
  // finished count is the one the loop reads anyway.
  std::function<void(const GenerateProgress&)> progress;
};

// Samples one completion per prompt. Prompts may differ in length (they are left padded). Runs on
// the model's device; the host reads one count (rows finished) every stop_check_every decode steps when
// stop tokens are set, and the results once at the end. Deterministic for given uniforms (or generator state).
std::vector<Completion> generate(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& options, at::Generator generator);

// Rows with the same prompt as the row before them share it (a GRPO group's rows are consecutive):
// of_row[b] is the index of row b's distinct prompt (ascending from 0), first_rows[u] the first row
// of distinct prompt u.
struct PromptGroups {
  std::vector<int64_t> of_row, first_rows;
};
PromptGroups consecutive_prompt_groups(const std::vector<std::vector<int32_t>>& prompts);

// Prompts left-padded with `pad_id` to (B, P) int64 on `device`, and which slots are real: (B, P)
// bool, or undefined when no prompt is padded. Built on the host, one copy each to the device.
std::pair<torch::Tensor, torch::Tensor> pad_prompts(const std::vector<std::vector<int32_t>>& prompts, int64_t P,
                                                    int32_t pad_id, const torch::Device& device);

// (rows, tokens) float32 uniforms on `device`: element [i][t] is sampling_uniform(seed, step,
// global_rows[i], t) (unstuck/rollout/sampling_uniform.h). A rank passes its own global rows, so
// every rank samples what a single process would.
torch::Tensor sampling_uniforms(uint64_t seed, int64_t step, const std::vector<int64_t>& global_rows, int64_t tokens,
                                const torch::Device& device);

// Which implementation draws the tokens from a step's logits. automatic: the fused kernel
// (src/rollout/sample_kernel.h: one read of each row's logits; tokens and log-probs) for FP32 logits
// on the CPU, libtorch's ops elsewhere. ops: libtorch's ops (the baseline in `bench sample`). kernel:
// the fused kernel, its CUDA twin on a device (greedy and temperature sampling; not yet the default
// there: it is checked against the CPU's bits on a GPU lease first).
enum class SamplerPath { automatic, ops, kernel };

// Next tokens (A) int64 and their log-probs (A) float32 from logits (A, V) and uniforms (A) (undefined
// when greedy), as generate() draws them: token = the first whose cumulative probability under the
// temperature-scaled, top-k / top-p filtered distribution exceeds uniform * total; log-prob under the
// temperature-scaled distribution before filtering. The two paths draw the same tokens except where a
// uniform falls within rounding of a CDF boundary, and log-probs within 1e-5.
std::pair<torch::Tensor, torch::Tensor> sample_logits(const torch::Tensor& logits, const SamplingConfig& s,
                                                      const torch::Tensor& uniform,
                                                      SamplerPath path = SamplerPath::automatic);

// The rows a fixed-shape decode step computes for `rows` unfinished ones (of at most `max_rows`):
// `rows` rounded up to a multiple of a quarter of the power of two below it (at least 8), at most
// max_rows. A batch shrinking from 256 meets 256, 224, 192, 160, 128, 112, ..., 16, 8: few shapes
// (one CUDA graph each), with at most a quarter of the rows stale above 32 rows and at most 7 below.
// Example: decode_bucket(200, 256) == 224.
int64_t decode_bucket(int64_t rows, int64_t max_rows);

// The decode mode a run takes on `device`: auto resolved (graphs on a GPU of a CUDA build, else
// dynamic; dynamic without the cache), graphs refused by name where they cannot run.
DecodeMode resolve_decode_mode(DecodeMode mode, const torch::Device& device, bool use_cache);

// Throws UserError naming rollout.<field> for out-of-range sampling options.
void validate_sampling(const SamplingConfig& config);

}  // namespace unstuck::rollout
