// Model directories in the Hugging Face Llama layout: config.json (LlamaConfig fields) and
// model.safetensors (tensors named model.embed_tokens.weight, model.layers.{i}..., lm_head.weight),
// loadable by transformers' LlamaForCausalLM and by us. Weights load into an FP32 flat buffer.
#pragma once

#include <torch/types.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "unstuck/io/safetensors.h"
#include "unstuck/model/model_config.h"

namespace unstuck::model {

// Special token ids recorded in config.json (bos_token_id, eos_token_id, pad_token_id).
struct SpecialTokens {
  int32_t bos = -1, eos = -1, pad = -1;
};

// config.json <-> ModelConfig. Missing or mistyped keys throw UserError naming `source`.
ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source);
nlohmann::json model_config_to_hf(const ModelConfig& config, const SpecialTokens& tokens);

struct LoadedModel {
  ModelConfig config;
  torch::Tensor flat;   // FP32, llama_layout(config).total elements
  SpecialTokens tokens;
};

// Loads dir/config.json and dir/model.safetensors (F32, BF16 or F16 tensors). A missing or extra
// tensor, or a shape mismatch, throws UserError naming the file and the tensor.
LoadedModel load_pretrained(const std::filesystem::path& dir);

// Writes dir/config.json and dir/model.safetensors with tensors in `dtype` (BF16 / F16 are
// round-to-nearest from the FP32 flat buffer). Each file is written atomically.
void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config,
                     const torch::Tensor& flat_fp32, io::DType dtype, const SpecialTokens& tokens);

}  // namespace unstuck::model
