// Options of the policy model: a decoder-only transformer in the Llama family (RMSNorm, rotary
// position embedding, grouped-query attention, SwiGLU MLP) with the per-family parts of Qwen2
// (q/k/v biases), Qwen3 (per-head q/k RMSNorm) and Llama 3 (RoPE scaling). Header-only; config.json
// maps onto it in hf_config.h, which refuses anything this struct cannot express.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace unstuck::model {

// Longest context a run accepts (model.max_seq_len, config.json max_position_embeddings,
// rollout.max_new_tokens): larger values are typos that would only fail inside an allocation.
inline constexpr int64_t kMaxSeqLen = int64_t(1) << 24;

// Which Hugging Face architecture the weights follow; decides config.json's model_type and
// architectures on export (the math is fixed by the feature fields below).
enum class Family { llama, qwen2, qwen3, mistral };

inline constexpr std::array<std::pair<Family, const char*>, 4> kFamilyNames{{
    {Family::llama, "llama"},
    {Family::qwen2, "qwen2"},
    {Family::qwen3, "qwen3"},
    {Family::mistral, "mistral"},
}};
constexpr const auto& enum_names(Family) { return kFamilyNames; }

// Rotary frequency scaling (config.json rope_scaling / rope_parameters rope_type).
enum class RopeType { none, linear, llama3, yarn };

inline constexpr std::array<std::pair<RopeType, const char*>, 4> kRopeTypeNames{{
    {RopeType::none, "default"},
    {RopeType::linear, "linear"},
    {RopeType::llama3, "llama3"},
    {RopeType::yarn, "yarn"},
}};
constexpr const auto& enum_names(RopeType) { return kRopeTypeNames; }

struct RopeScaling {
  RopeType type = RopeType::none;   // default = plain RoPE
  double factor = 1.0;              // linear / llama3 / yarn: context extension factor
  double low_freq_factor = 1.0;     // llama3: wavelengths above original/low are divided by factor
  double high_freq_factor = 4.0;    // llama3: wavelengths below original/high are kept
  int64_t original_max_len = 8192;  // llama3 / yarn: context length before the extension
  double beta_fast = 32.0;          // yarn: rotations where the ramp starts
  double beta_slow = 1.0;           // yarn: rotations where the ramp ends
  double attention_factor = 0.0;    // yarn: cos/sin scale; 0 = 0.1 ln(factor) + 1

  template <class V>
  void visit(V& v) {
    v("type", type, "RoPE scaling: default (none), linear, llama3 or yarn");
    v("factor", factor, "linear / llama3 / yarn: context extension factor");
    v("low_freq_factor", low_freq_factor, "llama3: low-frequency factor");
    v("high_freq_factor", high_freq_factor, "llama3: high-frequency factor");
    v("original_max_len", original_max_len, "llama3 / yarn: context length before the extension");
    v("beta_fast", beta_fast, "yarn: beta_fast");
    v("beta_slow", beta_slow, "yarn: beta_slow");
    v("attention_factor", attention_factor, "yarn: cos/sin scale (0 = 0.1 ln(factor) + 1)");
  }
};

struct ModelConfig {
  Family family = Family::llama;  // Hugging Face architecture written on export
  int64_t vocab_size = 0;         // tokens in the vocabulary; 0 = the tokenizer's
  int64_t dim = 128;              // hidden size
  int64_t n_layers = 4;           // transformer blocks
  int64_t n_heads = 4;            // attention (query) heads
  int64_t n_kv_heads = 4;         // key/value heads (grouped-query attention); divides n_heads
  int64_t head_size = 0;          // per-head width; 0 = dim / n_heads
  int64_t ffn_dim = 384;          // SwiGLU inner size
  int64_t max_seq_len = 128;      // longest sequence (prompt + completion) the model serves
  double rope_theta = 10000.0;    // rotary embedding base
  RopeScaling rope_scaling;       // rotary frequency scaling (Llama 3.x: llama3)
  double norm_eps = 1e-5;         // RMSNorm epsilon
  bool tie_embeddings = false;    // share the input embedding with the output head
  bool qkv_bias = false;          // q/k/v projections have biases (Qwen2)
  bool o_bias = false;            // the output projection has a bias (Llama attention_bias)
  bool qk_norm = false;           // per-head RMSNorm of queries and keys before RoPE (Qwen3)
  int64_t sliding_window = 0;     // attention looks back at most this many tokens; 0 = unlimited
  double init_std = 0.02;         // std of the normal init of weight matrices (training from scratch)
  bool activation_checkpointing =
      false;  // recompute each layer in the backward pass instead of keeping its activations

  int64_t head_dim() const { return head_size > 0 ? head_size : (n_heads > 0 ? dim / n_heads : 0); }

  template <class V>
  void visit(V& v) {
    v("family", family, "Hugging Face architecture written on export: llama, qwen2, qwen3, mistral");
    v("vocab_size", vocab_size, "tokens in the vocabulary (0 = take it from the tokenizer)");
    v("dim", dim, "hidden size");
    v("n_layers", n_layers, "transformer blocks");
    v("n_heads", n_heads, "attention (query) heads");
    v("n_kv_heads", n_kv_heads, "key/value heads (grouped-query attention); divides n_heads");
    v("head_size", head_size, "per-head width (0 = dim / n_heads, which must then divide)");
    v("ffn_dim", ffn_dim, "SwiGLU inner size");
    v("max_seq_len", max_seq_len, "longest sequence (prompt + completion) the model serves");
    v("rope_theta", rope_theta, "rotary position embedding base");
    v("rope_scaling", rope_scaling, "rotary frequency scaling");
    v("norm_eps", norm_eps, "RMSNorm epsilon");
    v("tie_embeddings", tie_embeddings, "share the input embedding matrix with the output head");
    v("qkv_bias", qkv_bias, "q/k/v projections have biases (Qwen2)");
    v("o_bias", o_bias, "the attention output projection has a bias");
    v("qk_norm", qk_norm, "per-head RMSNorm of queries and keys before RoPE (Qwen3)");
    v("sliding_window", sliding_window, "attention looks back at most this many tokens (0 = unlimited)");
    v("init_std", init_std, "std of the normal initialization of weight matrices");
    v("activation_checkpointing", activation_checkpointing,
      "keep only each layer's input in training forwards and recompute the layer in the backward pass "
      "(less activation memory, about one more forward of compute)");
  }
};

}  // namespace unstuck::model
