// The weights a GRPO run starts from, read as the trainer and the export both need them: the base
// policy's FP32 weights with the run's grpo.round_base_to_* applied, and with LoRA the adapters it
// starts with (grpo.base_adapter, or fresh ones by lora.init).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>

#include "unstuck/config/run_config.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/lora.h"

namespace unstuck::train {

// The base policy of `dir` (its config.json already read as `hf`) as FP32 weights, put on the grid
// grpo.round_base_to_fp8 / grpo.round_base_to_bf16 name, as the run trains from them.
torch::Tensor load_base_weights(const RunConfig& config, const std::filesystem::path& dir, const model::HfConfig& hf);

// LoRA: grpo.base_adapter read for config.model and checked against the lora: keys; a differing
// r, lora_alpha, use_rslora or target set is refused naming both values.
model::LoadedAdapter read_base_adapter(const RunConfig& config);

// LoRA: the FP32 adapters a run starts from (lora_layout order): grpo.base_adapter's, or fresh ones
// drawn by lora.init from `init_seed` (the run's seeds.init). lora.init pissa takes them from
// `base` (load_base_weights', FP32), which becomes the residual (model::pissa_init).
torch::Tensor start_adapters(const RunConfig& config, uint64_t init_seed, torch::Tensor& base);

}  // namespace unstuck::train
