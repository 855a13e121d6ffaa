// A trained policy directory (SFT output): Hugging Face weights + config.json, the tokenizer, and
// the run config that produced it (task, templates, verifier options). Loaded for eval, generate
// and as the GRPO base policy.
#pragma once

#include <torch/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "unstuck/config/run_config.h"
#include "unstuck/model/llama.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::train {

struct Policy {
  RunConfig config;  // the producing run's config, with overrides applied
  tokenizer::Tokenizer tokenizer;
  torch::Tensor master;                      // FP32 weights as stored
  std::unique_ptr<model::LlamaModel> model;  // over `master` converted to `dtype`
  std::vector<int32_t> stop_ids;             // stop_token_ids() of the directory
};

// The token ids a completion of the model in `model_dir` ends at: the tokenizer's EOS, then every
// eos_token_id of config.json (`config_eos_ids`, as load_pretrained() parsed them) and of
// generation_config.json (one id or a list), without repeats.
// Instruct models list several there (Llama 3: <|end_of_text|>, <|eom_id|>, <|eot_id|>; Qwen2.5:
// <|im_end|>, <|endoftext|>), and a chat model stops at any of them. An id outside the model's
// vocabulary is a UserError naming the file.
std::vector<int32_t> stop_token_ids(const std::filesystem::path& model_dir, const std::vector<int32_t>& config_eos_ids,
                                    const tokenizer::Tokenizer& tok, int64_t vocab_size);

// The run config stored in a policy directory (config.yaml; the defaults without one) with
// `overrides` applied after run.device=auto. Throws UserError when `dir` is not a directory.
RunConfig policy_run_config(const std::filesystem::path& dir, const std::vector<std::string>& overrides);

// Loads dir/{config.json, model.safetensors, tokenizer.model, config.yaml}; `overrides` apply to
// the stored run config (e.g. data.test_path=...). `dtype`: kFloat32 or kBFloat16 compute. The model
// goes to run.device of the overrides, else to auto (a usable GPU, else the CPU), never to the
// device the producing run recorded.
Policy load_policy(const std::filesystem::path& dir, const std::vector<std::string>& overrides,
                   torch::ScalarType dtype = torch::kFloat32);

}  // namespace unstuck::train
