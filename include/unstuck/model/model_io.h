// Model directories in the Hugging Face layout: config.json (see hf_config.h) and weights in
// model.safetensors or sharded model-0000i-of-0000N.safetensors + model.safetensors.index.json,
// loadable by transformers and by us. Weights load memory-mapped into an FP32 flat buffer.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "unstuck/io/safetensors.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/model_config.h"

namespace unstuck::model {

struct LoadedModel {
  ModelConfig config;
  torch::Tensor flat;   // FP32, llama_layout(config).total elements
  SpecialTokens tokens;
  std::string dtype;    // config.json's torch_dtype / dtype, empty when absent
};

// Loads dir/config.json and the weights (F32, BF16 or F16 tensors; single file or sharded). The
// config is validated and checked against the checkpoint's tensor headers before anything is
// allocated. A missing or extra tensor, a shape mismatch, a NaN or infinite weight, or a layer
// count / vocabulary that disagrees with the tensors throws UserError naming the file and tensor.
LoadedModel load_pretrained(const std::filesystem::path& dir);

// Writes dir/config.json and the weights with tensors in `dtype`: a flat buffer already in that
// dtype is written bit for bit; an FP32 one is rounded to nearest. `max_shard_bytes` > 0 shards the
// weights (with model.safetensors.index.json) when they exceed it. Each file is written atomically.
void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config, const torch::Tensor& flat,
                     io::DType dtype, const SpecialTokens& tokens, uint64_t max_shard_bytes = 0);

torch::ScalarType torch_dtype(io::DType dtype);
const char* hf_dtype_name(io::DType dtype);  // "float32", "bfloat16", "float16"

}  // namespace unstuck::model
