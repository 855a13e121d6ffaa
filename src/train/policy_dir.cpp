// Loading a policy directory written by `unstuck sft` or `unstuck export` (or any supported HF model
// directory plus tokenizer.model).
#include "unstuck/train/policy_dir.h"

#include <algorithm>

#include "unstuck/common/error.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/sft.h"
#include "unstuck/train/torch_device.h"

namespace unstuck::train {

std::vector<int32_t> stop_token_ids(const std::filesystem::path& model_dir, const std::vector<int32_t>& config_eos_ids,
                                    const tokenizer::Tokenizer& tok, int64_t vocab_size) {
  std::vector<int32_t> ids;
  const auto add = [&](int32_t id, const std::string& source) {
    if (id < 0) return;
    if (id >= vocab_size)
      throw UserError(source + ": eos_token_id " + std::to_string(id) + " is outside the model's vocabulary of " +
                      std::to_string(vocab_size) + " tokens");
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  add(tok.eos_id(), "the tokenizer");
  for (int32_t id : config_eos_ids) add(id, (model_dir / "config.json").string());
  const std::filesystem::path generation = model_dir / "generation_config.json";
  if (std::filesystem::exists(generation))
    for (int32_t id : model::read_generation_eos_ids(generation)) add(id, generation.string());
  return ids;
}

RunConfig policy_run_config(const std::filesystem::path& dir, const std::vector<std::string>& overrides) {
  if (!std::filesystem::is_directory(dir)) throw UserError("model directory '" + dir.string() + "' does not exist");
  const std::filesystem::path cfg_path = dir / kRunConfigFile;
  // Where the producing run computed says nothing about this machine: run.device is auto (a usable
  // GPU, else the CPU) unless the caller's overrides, applied after it, name it.
  std::vector<std::string> all_overrides{"run.device=auto"};
  all_overrides.insert(all_overrides.end(), overrides.begin(), overrides.end());
  return load_run_config(std::filesystem::exists(cfg_path) ? cfg_path : "", all_overrides);
}

Policy load_policy(const std::filesystem::path& dir, const std::vector<std::string>& overrides,
                   torch::ScalarType dtype) {
  RunConfig config = policy_run_config(dir, overrides);
  const torch::Device device = torch_device(config);
  model::LoadedModel loaded = model::load_pretrained(dir);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);  // tokenizer.json, else tokenizer.model
  // Real checkpoints pad the embedding beyond the tokenizer (Qwen2.5: 151936 rows, 151665 tokens).
  if (tok.vocab_size() > loaded.config.vocab_size)
    throw UserError(dir.string() + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                    " pieces but config.json says vocab_size " + std::to_string(loaded.config.vocab_size));
  config.model = loaded.config;
  auto model = std::make_unique<model::LlamaModel>(loaded.config, loaded.flat.to(device, dtype));
  std::vector<int32_t> stops = stop_token_ids(dir, loaded.tokens.eos_ids, tok, loaded.config.vocab_size);
  return {std::move(config), std::move(tok), loaded.flat, std::move(model), std::move(stops)};
}

}  // namespace unstuck::train
