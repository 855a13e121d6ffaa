// Model shapes for tests: one call names a shape instead of a block of field assignments.
#pragma once

#include <cstdint>

#include "unstuck/model/model_config.h"

namespace unstuck::testing {

inline model::ModelConfig model_shape(int64_t vocab, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                                      int64_t ffn, int64_t max_seq_len = model::ModelConfig{}.max_seq_len) {
  model::ModelConfig c;
  c.vocab_size = vocab;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.ffn_dim = ffn;
  c.max_seq_len = max_seq_len;
  return c;
}

}  // namespace unstuck::testing
