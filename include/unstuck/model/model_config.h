// Options of the policy model: a Llama-style decoder-only transformer (RMSNorm, rotary position
// embedding, grouped-query attention, SwiGLU MLP, optional tied embeddings). Header-only; the field
// names map one to one onto Hugging Face's LlamaConfig (see hf_config.h).
#pragma once

#include <cstdint>

namespace unstuck::model {

struct ModelConfig {
  int64_t vocab_size = 0;      // tokens in the vocabulary; 0 = the tokenizer's
  int64_t dim = 128;           // hidden size
  int64_t n_layers = 4;        // transformer blocks
  int64_t n_heads = 4;         // attention (query) heads; dim must be divisible by it
  int64_t n_kv_heads = 4;      // key/value heads (grouped-query attention); divides n_heads
  int64_t ffn_dim = 384;       // SwiGLU inner size
  int64_t max_seq_len = 128;   // longest sequence (prompt + completion) the model serves
  double rope_theta = 10000.0; // rotary embedding base
  double norm_eps = 1e-5;      // RMSNorm epsilon
  bool tie_embeddings = false; // share the input embedding with the output head
  double init_std = 0.02;      // std of the normal init of weight matrices (training from scratch)

  int64_t head_dim() const { return dim / n_heads; }

  template <class V>
  void visit(V& v) {
    v("vocab_size", vocab_size, "tokens in the vocabulary (0 = take it from the tokenizer)");
    v("dim", dim, "hidden size");
    v("n_layers", n_layers, "transformer blocks");
    v("n_heads", n_heads, "attention (query) heads; dim must be divisible by it");
    v("n_kv_heads", n_kv_heads, "key/value heads (grouped-query attention); divides n_heads");
    v("ffn_dim", ffn_dim, "SwiGLU inner size");
    v("max_seq_len", max_seq_len, "longest sequence (prompt + completion) the model serves");
    v("rope_theta", rope_theta, "rotary position embedding base");
    v("norm_eps", norm_eps, "RMSNorm epsilon");
    v("tie_embeddings", tie_embeddings, "share the input embedding matrix with the output head");
    v("init_std", init_std, "std of the normal initialization of weight matrices");
  }
};

}  // namespace unstuck::model
