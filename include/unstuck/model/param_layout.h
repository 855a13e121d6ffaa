// The layout table of the flat parameter buffers (DESIGN.md, "Parameter storage"): every model
// tensor is a range of one flat buffer, named as in Hugging Face's checkpoints. Sharding, the fused
// optimizer, rounding and checkpoints all work on these (offset, size) ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "unstuck/model/model_config.h"
#include "unstuck/precision/fused_adamw.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::model {

struct ParamEntry {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // e.g. {n_heads * head_dim, dim}
  int64_t offset = 0;          // first element in the flat buffer (a multiple of kParamAlign)
  int64_t numel = 0;
  bool decay = true;  // weight decay applies (matrices yes; norms, biases, embeddings no)
};

// Tensors start on multiples of this many elements (a stochastic-rounding tile), so the SIMD
// kernels run on whole tiles; the gaps hold zeros and belong to no tensor.
constexpr int64_t kParamAlign = 128;

// Largest model we agree to lay out (elements of the flat buffer): 2^38, about 275 billion. A
// larger count means a mistyped config (num_hidden_layers 1e9), refused before any allocation.
constexpr int64_t kMaxParams = int64_t(1) << 38;

struct ParamLayout {
  std::vector<ParamEntry> entries;  // in model order
  int64_t total = 0;                // flat buffer length, padding included

  const ParamEntry* find(const std::string& name) const;
  // One optimizer segment per tensor (global offsets).
  std::vector<precision::Segment> segments() const;
  // precision.mode fp8_rn / fp8_sr: the matrices whose rows are FP8 channels, every 2-D tensor of the
  // transformer blocks (the attention and MLP projections; not the embedding or the head), in order.
  std::vector<precision::Fp8Matrix> fp8_matrices() const;
};

// One tensor of a transformer block: name suffix after "model.layers.{i}.", shape, decay. The one
// list of what a layer holds for `config` (optional parts included only when the config has them).
struct LayerTensor {
  std::string suffix;  // e.g. "self_attn.q_proj.bias"
  std::vector<int64_t> shape;
  bool decay = true;
};
std::vector<LayerTensor> layer_tensors(const ModelConfig& config);

// Layout of the model with `config` (validated: throws UserError naming the bad field).
ParamLayout llama_layout(const ModelConfig& config);

// Parameters of the model (without alignment padding), computed without building the layout.
int64_t parameter_count(const ModelConfig& config);

// Throws UserError with the dotted key (model.<field>) when the options are inconsistent, out of
// range, or describe a model over kMaxParams elements. Never divides by a zero field.
void validate_model_config(const ModelConfig& config);

}  // namespace unstuck::model
