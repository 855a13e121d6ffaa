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
  RunConfig config;                     // the producing run's config, with overrides applied
  tokenizer::Tokenizer tokenizer;
  torch::Tensor master;                 // FP32 weights as stored
  std::unique_ptr<model::LlamaModel> model;  // over `master` converted to `dtype`
};

// Loads dir/{config.json, model.safetensors, tokenizer.model, config.yaml}; `overrides` apply to
// the stored run config (e.g. data.test_path=...). `dtype`: kFloat32 or kBFloat16 compute.
Policy load_policy(const std::filesystem::path& dir, const std::vector<std::string>& overrides,
                   torch::ScalarType dtype = torch::kFloat32);

}  // namespace unstuck::train
