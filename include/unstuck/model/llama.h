// Llama-family decoder-only transformer on libtorch, Hugging Face's LlamaForCausalLM math (RMSNorm,
// rotary embeddings in the rotate-half convention, grouped-query attention, SwiGLU MLP) with the
// optional parts of Qwen2 / Qwen3 / Mistral (named per-layer weights). Parameters are views into one
// flat weight buffer (fp32, bf16 or fp16) that the precision core rewrites in place each step. Two
// paths: full-sequence forward (training) and KV-cached decoding (rollouts). Every helper tensor
// lives on the weights' device; attention is SDPA (causal flag, native GQA) without a dense mask
// whenever each row's real tokens form one run.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "unstuck/model/lora.h"
#include "unstuck/model/model_config.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::model {

// Keys and values of every layer for incremental decoding, plus which cache slots hold real tokens
// (padded prompts leave holes) and the rotary position each row continues from. The buffers grow
// with the filled slots in steps of `grow_slots` up to `capacity`: kGrowSlots for FP16 on the CPU
// (its decoding attends over the whole buffer, so a buffer sized to the fill reads less), the whole
// capacity at once for FP32 and BF16 on the CPU, whose decode kernel reads only the filled slots, and
// on a GPU, whose attention reads only the filled slots too (growing would only copy the cache). Dropping rows
// compacts them into the first rows of the same buffers.
struct KVCache {
  static constexpr int64_t kGrowSlots = 16;
  int64_t grow_slots = kGrowSlots;  // allocation step of reserve()
  std::vector<torch::Tensor> k, v;  // per layer: (B, n_kv_heads, allocated, head_dim)
  torch::Tensor key_valid;          // (B, allocated) bool
  torch::Tensor key_position;       // (B, allocated) int64: rotary position of each slot
  torch::Tensor next_position;      // (B) int64
  int64_t length = 0;               // slots filled so far
  int64_t capacity = 0;             // the most slots it may hold
  bool has_holes = false;           // some filled slot is padding (decoding then needs a key mask)
  // Fixed-shape decode steps (LlamaModel::decode_step, what CUDA graphs replay): the slot the next
  // token goes to as a 1-element int64 tensor on the cache's device (the step advances it), and how
  // many slots attention reads (a bucket >= the filled ones; a key mask hides the rest).
  torch::Tensor slot;
  int64_t attend_slots = 0;

  int64_t batch() const { return next_position.size(0); }
  int64_t allocated() const { return key_valid.size(1); }  // slots the buffers hold now
  // Grows the buffers to hold `slots` (<= capacity), keeping the filled ones; no-op when they do.
  void reserve(int64_t slots);
  // Keeps rows `rows` (ascending int64 indices on the cache's device), in that order, as rows
  // 0..rows.size(0)-1; the others are dropped. No reallocation of the key/value buffers.
  void keep_rows(const torch::Tensor& rows);
  // Fills this cache (batch() == rows.size(0), capacity >= from.length) with rows `rows` of `from`:
  // row i continues as from's row rows[i] (a shared prefill copied to the rows that share it).
  void copy_rows_from(const KVCache& from, const torch::Tensor& rows);
  // Fixed-shape decoding keeps its buffers where they are (graphs hold their addresses): rows `rows`
  // (ascending int64 indices) are copied to rows 0..rows.size(0)-1 of the same buffers; the rows
  // after them keep stale contents, and batch() does not change.
  void move_rows_to_front(const torch::Tensor& rows);
  // The first `n` rows as a cache that shares these buffers (and the slot tensor).
  KVCache first_rows(int64_t n) const;
};

// One transformer block's weights, by name; optional parts are undefined tensors when the family
// has none. Each is a view into the flat buffer.
struct LayerWeights {
  torch::Tensor attn_norm;             // (D) input_layernorm
  torch::Tensor wq, wk, wv, wo;        // (H*hd, D), (G*hd, D), (G*hd, D), (D, H*hd)
  torch::Tensor bq, bk, bv, bo;        // optional: (H*hd), (G*hd), (G*hd), (D)
  torch::Tensor q_norm, k_norm;        // optional: (hd) per-head RMSNorm (Qwen3)
  torch::Tensor mlp_norm;              // (D) post_attention_layernorm
  torch::Tensor w_gate, w_up, w_down;  // (F, D), (F, D), (D, F)
  // Views of the same memory as one matrix where the flat buffer holds the parts back to back (no
  // alignment gap): q/k/v as ((H+2G)*hd, D) (+ bias), gate/up as (2F, D). Used when no gradient is
  // taken (rollouts, measurements): one matrix product instead of three / two.
  torch::Tensor wqkv, bqkv, w_gate_up;
};

// Rows that continue shared prompts (a GRPO group: G completions of one prompt). The prompts are
// computed once each; every row's completion attends to its prompt's keys and values.
struct SharedPrompts {
  torch::Tensor tokens;  // (U, P) int64, distinct prompts, left-padded
  torch::Tensor valid;   // (U, P) bool marking real tokens, or undefined when none is padded
  torch::Tensor of_row;  // (n) int64: the prompt each row continues
};

// Per-layer keys and values of a prompt pass (captured) or given to a completion pass (prepended to
// each row's own keys, selected by `of_row`); internal to forward_completions().
struct PromptKV {
  bool capture = false;
  std::vector<torch::Tensor> k, v;  // per layer (U, G, P, hd), after RoPE
  torch::Tensor of_row;             // (n) int64
};

// lora.dropout in a training forward (forward_completions_hidden's / forward_hidden's `dropout`): the
// pass's key and the ids that key each row's masks (model/lora_dropout.h), so a row's masks do not
// depend on the chunk, rank or world size it is computed in. A model without adapters, or with
// lora.dropout 0, computes as without it.
struct DropoutRows {
  uint64_t key = 0;
  torch::Tensor rows;     // (n) int64 on the weights' device: the id of each row (< 2^31)
  torch::Tensor prompts;  // (U) int64: the id of each distinct prompt of a shared-prompt pass
};

// One pass's dropout inputs as its blocks take them (filled by the forward passes).
struct DropoutPass {
  uint64_t key = 0;
  bool prompts = false;     // the rows are a shared-prompt pass's distinct prompts (keyed apart)
  torch::Tensor ids;        // (B) int64
  torch::Tensor positions;  // (B, T) int64: the tokens' rotary positions
};

// lora.dropout's keep bits (B, T, features) uint8, 1 = kept, of module `m` of `layer` in `pass`
// (model/lora_dropout.h), on the pass's device: each element is dropped with probability p.
torch::Tensor lora_dropout_keep(const DropoutPass& pass, int64_t layer, LoraModule m, int64_t features, double p);
// (x * keep / (1 - p)) A^T with those bits (PEFT's nn.Dropout on the adapter's input, then lora_A),
// differentiable in x (B, T, in) and A (r, in); the backward regenerates the bits instead of keeping them.
torch::Tensor lora_dropout_linear(const torch::Tensor& x, const torch::Tensor& a, const DropoutPass& pass,
                                  int64_t layer, LoraModule m, double p);

class LlamaModel {
 public:
  // `flat_weights`: 1-D float tensor of layout.total elements. The parameters are tensors that share
  // its memory, so rewriting the buffer (rounding, loading) updates the model; the model keeps the
  // buffer alive and it must never be reallocated.
  LlamaModel(const ModelConfig& config, torch::Tensor flat_weights);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const torch::Tensor& flat_weights() const { return flat_; }
  // Parameters in layout order (leaf tensors; see set_requires_grad).
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  void set_requires_grad(bool requires_grad);

  // LoRA (lora.h): adapters on the projections `spec` targets, views of `flat` (lora_layout(config,
  // spec).total elements in the weights' dtype, on their device; the model keeps it alive). Every
  // path (forward, completions, cached decoding, checkpointed blocks) then computes a target's
  // output as x W^T + s (x A^T) B^T, unmerged; the fused q/k/v and gate/up products are not used.
  // With spec.dropout > 0 a pass given DropoutRows computes s (dropout(x) A^T) B^T, dropout(x) = x
  // * keep / (1 - p) with counter-based keep bits (regenerated in the backward, never stored);
  // other passes (rollouts, measurements) compute without it. adapter_parameters() are the A and B
  // leaves in lora_layout order, for requires_grad (their gradients arrive in .grad); the base
  // follows set_requires_grad as before.
  void set_adapters(const LoraSpec& spec, torch::Tensor flat);
  const std::vector<torch::Tensor>& adapter_parameters() const { return adapter_params_; }
  bool has_adapters() const { return !adapters_.empty(); }
  // The A and B of `module` in `layer` (undefined when it is not adapted).
  const std::pair<torch::Tensor, torch::Tensor>& adapter(int64_t layer, LoraModule module) const {
    return adapters_[std::size_t(layer)][std::size_t(module)];
  }

  // Full forward. tokens: (B, T) int64 on the weights' device. valid: (B, T) bool marking real
  // tokens, or undefined for "all real". Right padding needs no mask (causal attention never looks
  // right); left padding passes `valid`, and rotary positions then count real tokens only. Rows
  // whose real tokens form one run (left and/or right padding) are rotated to start at 0 and run
  // causally without a mask; other patterns get a (B, 1, T, T) mask. Outputs at padding positions
  // are unspecified. Returns (B, T - logits_from, V) float32: the logits of positions logits_from..T-1
  // (training needs only the completion's; the prompt's would cost as much lm_head work and memory).
  // With model.activation_checkpointing and gradients on, each layer's activations are recomputed in
  // the backward pass instead of kept.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& valid = {}, int64_t logits_from = 0) const;

  // Logits that predict each row's completion tokens: completions (n, T) int64 continuing the rows'
  // prompts, result (n, T, V) float32 where [:, t] predicts completions[:, t] (from the prompt's last
  // token for t = 0). Equal, up to the order of floating-point sums, to forward() on the rows'
  // concatenated prompt + completion[:, :T-1] with logits_from at the last prompt position, but each
  // distinct prompt runs through the model once (and its gradient is the sum over its rows): with G
  // rows per prompt the prompt's share of the work falls by G. Completion tokens are all real (their
  // padding after a stop token is never attended to by an earlier token). With
  // model.activation_checkpointing both passes recompute each layer in the backward (the prompt
  // pass's keys and values are the checkpointed layer's extra outputs). Falls back to that forward()
  // with a sliding window shorter than the sequence.
  torch::Tensor forward_completions(const SharedPrompts& prompts, const torch::Tensor& completions) const;
  // The same before the LM head: the final-normed hidden states (n, T, D) in the weights' dtype,
  // whose logits_of() are forward_completions()'s (a fused head takes them a chunk at a time).
  // `dropout`: lora.dropout's rows (the prompt pass keyed by dropout->prompts, the completion pass by
  // dropout->rows).
  torch::Tensor forward_completions_hidden(const SharedPrompts& prompts, const torch::Tensor& completions,
                                           const DropoutRows* dropout = nullptr) const;
  // forward() before the LM head (see forward_completions_hidden); `dropout` keys row b by dropout->rows[b].
  torch::Tensor forward_hidden(const torch::Tensor& tokens, const torch::Tensor& valid = {}, int64_t logits_from = 0,
                               const DropoutRows* dropout = nullptr) const;
  // The LM head on final-normed hidden states: (..., D) -> (..., V) float32.
  torch::Tensor logits_of(const torch::Tensor& normed) const;
  const torch::Tensor& head_weight() const { return head_; }  // (V, D): the embedding when tied

  // The flat FP32 gradient this model's backward adds into (layout.total elements on the weights'
  // device; the trainer's): the gradients of every weight matrix, bias and the embedding go there
  // straight from the backward pass (the linear layers' weight gradients a block of rows at a time,
  // the embedding's looked-up rows, the fused head's chunks via head_grad_sink()), never through
  // autograd's .grad, so no (V, D) gradient and no layer's gradient waiting for its other uses
  // exists. The norms' small gradients still arrive in their parameters' .grad.
  void set_gradient_buffer(const torch::Tensor& grad);
  // The head's range of that buffer ((V, D); the embedding's when tied), or undefined without one.
  const torch::Tensor& head_grad_sink() const { return head_sink_; }

  KVCache new_cache(int64_t batch, int64_t capacity) const;
  // new_cache() for rows that share slot indices but not positions (left-padded prompts, continued
  // contexts of different lengths): `capacity` may pass model.max_seq_len, the caller keeping each
  // row's positions within it.
  KVCache new_slots_cache(int64_t batch, int64_t capacity) const;
  // Appends tokens (B, S) to the cache and returns their logits (B, S, V) float32, or only the
  // last position's (B, 1, V) with `last_only`; equal to the matching rows of forward() on the
  // whole sequence.
  torch::Tensor forward_cached(const torch::Tensor& tokens, KVCache& cache, const torch::Tensor& valid = {},
                               bool last_only = false) const;
  // One fixed-shape decode step: tokens (A, 1) int64 written at slot cache.slot of every row (a cache
  // with a slot tensor, all of its capacity allocated), attention over the first cache.attend_slots
  // slots with the filled ones unmasked; returns the logits (A, 1, V) float32 and advances the slot
  // and the rows' positions on the device (the caller advances cache.length, the host's count). No
  // host synchronization and no shape that depends on the fill, so a CUDA graph can capture it. Equal
  // to forward_cached() on the same token up to the attention kernel's summation order.
  torch::Tensor decode_step(const torch::Tensor& tokens, KVCache& cache) const;

  // One transformer block (public for the activation-checkpointing backward): x (B, T, D), rotary
  // tables cos/sin (B, 1, T, hd), attention mask (B|1, 1, T, Tk) bool or undefined with `causal`.
  // `prompt_kv`: capture this block's keys/values, or prepend the rows' prompt keys/values.
  // `dropout`: lora.dropout's masks of this pass (see set_adapters).
  torch::Tensor block(int64_t layer, const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                      const torch::Tensor& mask, bool causal, KVCache* cache, PromptKV* prompt_kv = nullptr,
                      const DropoutPass* dropout = nullptr) const;
  // The adapters' buffer (set_adapters), or undefined.
  const torch::Tensor& adapter_flat() const { return adapter_flat_; }
  const LayerWeights& layer_weights(int64_t layer) const { return layers_[std::size_t(layer)]; }

 private:
  // Hidden states after the last block (B, T, D) for tokens at rotary `positions` (B, T).
  // `dropout` (its positions unset) applies lora.dropout to this pass.
  torch::Tensor hidden(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& mask,
                       bool causal, KVCache* cache, PromptKV* prompt_kv = nullptr,
                       const DropoutPass* dropout = nullptr) const;
  torch::Tensor head(const torch::Tensor& x) const;  // final norm + LM head -> (B, T, V) float32
  torch::Tensor final_norm(const torch::Tensor& x) const;
  const torch::Tensor& param(const std::string& name) const;  // by layout name; must exist
  // One view over consecutive layout tensors (stacked along dim 0), or undefined if a gap separates them.
  torch::Tensor adjacent(const std::vector<std::string>& names) const;
  // The same view of another buffer with this layout (the gradient).
  torch::Tensor adjacent_view(const torch::Tensor& buffer, const std::vector<std::string>& names) const;

  ModelConfig config_;
  ParamLayout layout_;
  torch::Tensor flat_;
  std::vector<torch::Tensor> params_;
  torch::Tensor embed_, final_norm_, head_;  // (V, D), (D), (V, D): head_ is embed_ when tied
  torch::Tensor grad_;                       // the flat FP32 gradient (set_gradient_buffer), or undefined
  torch::Tensor embed_sink_, head_sink_;     // its embedding and head ranges
  std::vector<LayerWeights> layer_sinks_;    // per layer: the ranges of its matrices and biases
  std::vector<LayerWeights> layers_;
  // LoRA: per layer, per LoraModule, (A, B) or undefined; the scaling s; the buffer they view.
  std::vector<std::array<std::pair<torch::Tensor, torch::Tensor>, kLoraModules>> adapters_;
  double lora_scaling_ = 0;
  double lora_dropout_ = 0;
  torch::Tensor adapter_flat_;
  std::vector<torch::Tensor> adapter_params_;
  torch::Tensor inv_freq_;     // (head_dim / 2) float32, scaled as config.rope_scaling says
  double rope_attention_ = 1;  // cos/sin multiplier (yarn's attention factor, else 1)
};

// Rotary inverse frequencies (head_dim / 2, float32) for `config`, with its RoPE scaling applied,
// and the cos/sin multiplier; as transformers' rope initialization functions compute them.
std::pair<torch::Tensor, double> rope_inv_freq(const ModelConfig& config);

// Fills an FP32 flat buffer with a fresh initialization: normal(0, init_std) for matrices and
// embeddings, ones for norms, zeros for biases and in the alignment gaps. Deterministic in `seed`.
void init_llama_weights(const ParamLayout& layout, const ModelConfig& config, torch::Tensor flat_fp32, uint64_t seed);

}  // namespace unstuck::model
