// Loading a policy directory written by `unstuck sft` or `unstuck export` (or any supported HF model
// directory plus tokenizer.model).
#include "unstuck/train/policy_dir.h"

#include "unstuck/common/error.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/sft.h"

namespace unstuck::train {

Policy load_policy(const std::filesystem::path& dir, const std::vector<std::string>& overrides,
                   torch::ScalarType dtype) {
  if (!std::filesystem::is_directory(dir))
    throw UserError("model directory '" + dir.string() + "' does not exist");
  const std::filesystem::path cfg_path = dir / kRunConfigFile;
  RunConfig config = load_run_config(std::filesystem::exists(cfg_path) ? cfg_path : "", overrides);
  model::LoadedModel loaded = model::load_pretrained(dir);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);  // tokenizer.json, else tokenizer.model
  // Real checkpoints pad the embedding beyond the tokenizer (Qwen2.5: 151936 rows, 151665 tokens).
  if (tok.vocab_size() > loaded.config.vocab_size)
    throw UserError(dir.string() + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                    " pieces but config.json says vocab_size " + std::to_string(loaded.config.vocab_size));
  config.model = loaded.config;
  auto model = std::make_unique<model::LlamaModel>(loaded.config, loaded.flat.to(dtype));
  return {std::move(config), std::move(tok), loaded.flat, std::move(model)};
}

}  // namespace unstuck::train
