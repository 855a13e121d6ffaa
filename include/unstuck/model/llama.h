// Llama-style decoder-only transformer on libtorch, Hugging Face's LlamaForCausalLM math: RMSNorm,
// rotary embeddings (rotate-half convention), grouped-query attention, SwiGLU MLP. Its parameters
// are views into one flat weight buffer (fp32, bf16 or fp16) that the precision core rewrites in
// place each step. Two paths: full-sequence forward (training) and KV-cached decoding (rollouts).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "unstuck/model/model_config.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::model {

// Keys and values of every layer for incremental decoding, plus which cache slots hold real tokens
// (left-padded prompts leave holes) and the rotary position each row continues from.
struct KVCache {
  std::vector<torch::Tensor> k, v;  // per layer: (B, n_kv_heads, capacity, head_dim)
  torch::Tensor key_valid;          // (B, capacity) bool
  torch::Tensor next_position;      // (B) int64
  int64_t length = 0;               // slots filled so far
  int64_t capacity = 0;
};

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

  // Full forward. tokens: (B, T) int64. valid: (B, T) bool marking real tokens, or undefined for
  // "all real". Right padding needs no mask (causal attention never looks right); left padding
  // passes `valid`, and rotary positions then count real tokens only. Returns (B, T, V) float32.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& valid = {}) const;

  KVCache new_cache(int64_t batch, int64_t capacity) const;
  // Appends tokens (B, S) to the cache and returns their logits (B, S, V) float32; equal to the
  // matching rows of forward() on the whole sequence.
  torch::Tensor forward_cached(const torch::Tensor& tokens, KVCache& cache,
                               const torch::Tensor& valid = {}) const;

 private:
  // The shared body: x positions (B, T), attention mask (B, 1, T, Tk) bool.
  torch::Tensor run(const torch::Tensor& tokens, const torch::Tensor& positions,
                    const torch::Tensor& mask, KVCache* cache) const;
  const torch::Tensor& param(std::size_t index) const { return params_[index]; }

  ModelConfig config_;
  ParamLayout layout_;
  torch::Tensor flat_;
  std::vector<torch::Tensor> params_;
  torch::Tensor inv_freq_;  // (head_dim / 2) float32
};

// Fills an FP32 flat buffer with a fresh initialization: normal(0, init_std) for matrices and
// embeddings, ones for norms, zeros in the alignment gaps. Deterministic in `seed`.
void init_llama_weights(const ParamLayout& layout, const ModelConfig& config, torch::Tensor flat_fp32,
                        uint64_t seed);

}  // namespace unstuck::model
