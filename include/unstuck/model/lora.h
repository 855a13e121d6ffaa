// LoRA adapters on the Llama-family model (arXiv 2106.09685), in PEFT's conventions: a target
// module's output becomes x W^T + s (x A^T) B^T with A (r, in) and B (out, r), s = alpha / r
// (alpha / sqrt(r) with rsLoRA). The adapters of a model are one flat FP32 buffer in
// lora_layout() order, named as PEFT's adapter_model.safetensors names them, so a PEFT adapter
// directory loads into it and the buffer writes back out as one.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "unstuck/model/lora_config.h"
#include "unstuck/model/model_config.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::model {

// The projections an adapter may target, by PEFT's (transformers') module names, in the order the
// layout holds them within a layer.
enum class LoraModule { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
inline constexpr int kLoraModules = 7;
const char* lora_module_name(LoraModule m);
// "q_proj" -> LoraModule::q_proj; throws UserError naming `what` for another name.
LoraModule parse_lora_module(const std::string& name, const std::string& what);

struct LoraSpec {
  int64_t rank = 0;                 // r
  double alpha = 0;                 // lora_alpha
  bool rslora = false;              // use_rslora: s = alpha / sqrt(r)
  std::vector<LoraModule> targets;  // the adapted projections, in LoraModule order, no repeats
  double dropout = 0;               // lora_dropout: the training forwards' dropout on the adapters' input
  int64_t pissa_niter = 0;          // pissa_init's SVD: 0 exact, N > 0 randomized with N subspace iterations
  double scaling() const;
  bool targets_module(LoraModule m) const;
};

// The spec of a `lora:` config (lora.rank > 0): its targets parsed, in LoraModule order; an unknown or
// repeated name is refused naming lora.target_modules.
LoraSpec lora_spec(const LoraConfig& config);

// Fresh adapters for `spec` (FP32, lora_layout order): every B zero, so the adapted model starts as
// the base, and every A drawn by `init` (kaiming or gaussian: PEFT's distributions) from a CPU
// generator seeded by `seed`. LoraInit::pissa is pissa_init's (it changes the base).
torch::Tensor init_lora(const ModelConfig& config, const LoraSpec& spec, LoraInit init, uint64_t seed);

// PiSSA (arXiv 2404.02948; peft's init_lora_weights "pissa"): every adapted matrix W (out, in) of
// `base` (FP32, llama_layout(config) order) is decomposed W ~ U_r S_r V_r^T into its r leading
// singular triplets; A = diag(sqrt(S_r / s)) V_r^T and B = U_r diag(sqrt(S_r / s)) (s =
// spec.scaling()), and W becomes the residual W - s B A in place, so the adapted model starts as
// the base up to rounding. The triplets come from a full SVD (spec.pissa_niter 0, peft's "pissa")
// or a randomized one (spec.pissa_niter N > 0, peft's "pissa_niter_N": r Gaussian test vectors,
// drawn from a CPU generator seeded by `seed`, and N subspace iterations; top_singular in
// lora.cpp). Returns the adapters (FP32, lora_layout order).
torch::Tensor pissa_init(const ModelConfig& config, const LoraSpec& spec, torch::Tensor& base, uint64_t seed);

// The adapters of `config` under `spec`: for each layer and each target (LoraModule order),
// `base_model.model.model.layers.<i>.<self_attn|mlp>.<module>.lora_A.weight` (r, in) then `lora_B`
// (out, r); aligned as llama_layout aligns (kParamAlign), A and B with weight decay.
ParamLayout lora_layout(const ModelConfig& config, const LoraSpec& spec);

// A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) read for
// `config`: the spec and the adapters as an FP32 flat buffer in lora_layout order. Refused with a
// UserError naming the file and key or tensor: another peft_type, a setting this model does not
// compute (DoRA, bias other than "none", fan_in_fan_out, modules_to_save, rank or alpha patterns,
// layer selections, or any other key that is set to something but its off value), a target outside
// the seven projections, a missing, extra or misshapen tensor, an unsupported dtype.
struct LoadedAdapter {
  LoraSpec spec;
  torch::Tensor flat;  // (lora_layout(config, spec).total) float32
};
LoadedAdapter load_peft_adapter(const std::filesystem::path& dir, const ModelConfig& config);

// Writes a PEFT adapter directory: adapter_config.json (peft_type LORA, r, lora_alpha, use_rslora,
// target_modules by module name, bias "none", task_type CAUSAL_LM, base_model_name_or_path =
// `base_model`, the other settings off) and adapter_model.safetensors holding `flat` (lora_layout
// order; FP32, BF16 or F16 as it is) under PEFT's tensor names; peft's PeftModel.from_pretrained loads
// it onto the base. Files are written atomically.
void save_peft_adapter(const std::filesystem::path& dir, const ModelConfig& config, const LoraSpec& spec,
                       const torch::Tensor& flat, const std::string& base_model = "");

// PiSSA adapters as a plain LoRA adapter of the original base (peft's
// path_initial_model_for_weight_conversion): rank 2r, A' = [A; A0] and B' = [B, -B0] with lora_alpha
// 2 alpha (sqrt(2) alpha with rsLoRA, the same scaling s), so W + s B' A' = (W - s B0 A0) + s B A:
// the residual base plus the trained adapters. `adapters` (any float dtype, kept) and `initial`
// (pissa_init's A0, B0) in lora_layout(config, spec) order.
LoadedAdapter pissa_as_lora(const ModelConfig& config, const LoraSpec& spec, const torch::Tensor& adapters,
                            const torch::Tensor& initial);

// W + s B A for every adapted matrix of `base_flat` (llama_layout(config) order, FP32), the other
// tensors unchanged: the merged model (what peft's merge_and_unload computes), in FP32.
torch::Tensor merge_lora(const ModelConfig& config, const torch::Tensor& base_flat, const LoraSpec& spec,
                         const torch::Tensor& adapter_flat);

}  // namespace unstuck::model
