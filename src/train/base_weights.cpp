// The base policy and the LoRA adapters a GRPO run starts from.
#include "train/base_weights.h"

#include <fmt/format.h>

#include "unstuck/common/error.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {

torch::Tensor load_base_weights(const RunConfig& config, const std::filesystem::path& dir, const model::HfConfig& hf) {
  model::LoadedModel loaded = model::load_pretrained(dir, hf);
  torch::Tensor master = std::move(loaded.flat);
  if (config.grpo.round_base_to_fp8)
    round_base_to_fp8_(master, model::llama_layout(config.model), config.precision.threads);
  else if (config.grpo.round_base_to_bf16)
    round_base_to_grid_(master, config.precision.analog_mantissa_bits);
  return master;
}

model::LoadedAdapter read_base_adapter(const RunConfig& config) {
  const std::filesystem::path dir = config.grpo.base_adapter;
  model::LoadedAdapter a = model::load_peft_adapter(dir, config.model);
  const model::LoraSpec want = model::lora_spec(config.lora);
  const auto names = [](const model::LoraSpec& s) {
    std::string out;
    for (model::LoraModule m : s.targets) out += std::string(out.empty() ? "" : ", ") + model::lora_module_name(m);
    return "[" + out + "]";
  };
  const std::string where = "grpo.base_adapter '" + dir.string() + "'";
  if (a.spec.rank != want.rank)
    throw UserError(fmt::format("{} has r {}, lora.rank is {}", where, a.spec.rank, want.rank));
  if (a.spec.alpha != want.alpha)
    throw UserError(fmt::format("{} has lora_alpha {}, lora.alpha is {}", where, a.spec.alpha, want.alpha));
  if (a.spec.rslora != want.rslora)
    throw UserError(fmt::format("{} has use_rslora {}, lora.rslora is {}", where, a.spec.rslora, want.rslora));
  if (a.spec.targets != want.targets)
    throw UserError(fmt::format("{} adapts {}, lora.target_modules is {}", where, names(a.spec), names(want)));
  return a;
}

torch::Tensor start_adapters(const RunConfig& config, uint64_t init_seed, torch::Tensor& base) {
  if (!config.grpo.base_adapter.empty()) return read_base_adapter(config).flat;
  if (config.lora.init == model::LoraInit::pissa)
    return model::pissa_init(config.model, model::lora_spec(config.lora), base, init_seed);
  return model::init_lora(config.model, model::lora_spec(config.lora), config.lora.init, init_seed);
}

}  // namespace unstuck::train
