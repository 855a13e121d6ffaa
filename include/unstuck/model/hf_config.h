// Hugging Face config.json <-> ModelConfig for the supported families (llama, qwen2, qwen3,
// mistral). Parsing is strict: every key is either understood, known not to change the computed
// function, or refused by name; the model's feature set comes from model_type plus the keys.
// Plain C++ (no libtorch), so `unstuck inspect` can read a config without loading weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/model_config.h"

namespace unstuck::model {

// Special token ids recorded in config.json (bos_token_id, eos_token_id, pad_token_id); -1 absent.
struct SpecialTokens {
  int32_t bos = -1, eos = -1, pad = -1;
  std::vector<int32_t> eos_ids;  // every EOS id when config.json lists several (eos is the first)
};

// What config.json says, parsed.
struct HfConfig {
  ModelConfig model;
  SpecialTokens tokens;
  std::string dtype;  // torch_dtype / dtype as written ("bfloat16", ...), empty when absent
};

// The families we compute, as "model_type (Architecture)" for messages.
std::string supported_families_text();

// Parses a config.json object. Throws UserError naming `source` and the dotted key for: a missing
// or mistyped key, an unsupported model_type / architectures / hidden_act / rope type, a key that
// would change the function in a way we do not compute, and sizes that are out of range.
HfConfig parse_hf_config(const nlohmann::json& hf, const std::string& source);
HfConfig read_hf_config(const std::filesystem::path& config_json);

// eos_token_id of a generation_config.json (one id or a list; empty when absent or null): the ids
// generation stops at. Throws UserError naming the file and key for a mistyped value.
std::vector<int32_t> read_generation_eos_ids(const std::filesystem::path& generation_config_json);

// Checks a checkpoint's tensor headers against `config` without reading any tensor data: the
// embedding's shape and the layer count first (so an absurd num_hidden_layers never builds a
// layout), then every tensor's presence and shape, and no unexpected tensor. Throws UserError
// naming `config_file` and its key, or the weights file and the tensor.
void check_weights_match(const ModelConfig& config, const io::SafetensorsDir& weights, const std::string& config_file);

// config.json for `config` (model_type and architectures from config.family).
nlohmann::json hf_config_json(const ModelConfig& config, const SpecialTokens& tokens, const std::string& dtype);

}  // namespace unstuck::model
