// Hugging Face model directories out of a training run: `unstuck export` (from a GRPO checkpoint)
// and RUN_DIR/final_model/ at the end of GRPO. The directory holds config.json,
// generation_config.json, (sharded) safetensors, the base policy's tokenizer files and config.yaml,
// so transformers, inference servers and `unstuck eval` all load it unchanged.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "unstuck/config/run_config.h"
#include "unstuck/io/safetensors.h"

namespace unstuck::train {

inline constexpr uint64_t kDefaultShardBytes = 2'000'000'000;  // transformers' "2GB"

struct ExportOptions {
  int64_t step = -1;  // checkpoint step; -1 = the newest
  std::string dtype;  // bf16 | fp16 | fp32; empty = the run's compute dtype
  // hf | fp8 (compressed-tensors FP8 codes + scales; FP8 runs) | peft | merged (LoRA runs)
  std::string format = "hf";
  uint64_t shard_bytes = kDefaultShardBytes;  // largest safetensors file (0 = one file)
};

// Writes `out` from `flat` (layout.total elements; FP32 master or compute weights already in
// `dtype`, written bit for bit) with `config`'s model and the tokenizer files of its base policy.
void write_model_dir(const std::filesystem::path& out, const RunConfig& config, const torch::Tensor& flat,
                     io::DType dtype, uint64_t shard_bytes = kDefaultShardBytes);

// <run_dir>/final_model/ from the run's compute weights (in their own dtype, bit for bit); with
// LoRA, <run_dir>/final_adapter/, the adapters' compute weights as a PEFT adapter directory.
// lora.init pissa: `pissa_start` (the adapters' FP32 start) converts final_adapter/ to a rank-2r
// adapter of the original base (model::pissa_as_lora).
void write_final_model(const std::filesystem::path& run_dir, const RunConfig& config, const torch::Tensor& compute,
                       const torch::Tensor& pissa_start = {});

// Exports the checkpoint of run_dir (checkpoints/step_N). With opts.dtype equal to the run's
// compute dtype the exact compute weights of that step are written (regenerated from the master
// with the run's rounding key: for bf16_sr the stochastically rounded ones); fp32 writes the
// master; another dtype rounds the master to nearest. opts.format fp8 (fp8_rn / fp8_sr runs) writes
// those compute weights losslessly as compressed-tensors' FP8 format: E4M3 codes with a BF16 scale
// per output channel, config.json's quantization_config saying so; it returns DType::f8_e4m3.
// A LoRA run's checkpoint holds the adapters: opts.format peft writes them (compute weights, or
// the FP32 master with --dtype fp32) as a PEFT adapter directory for grpo.base_model; merged
// writes a full model, W + s B A in FP32 from the run's frozen base (the base rounded to nearest
// into the compute dtype, as the run computed with it) and the adapters' compute weights, rounded
// to nearest into opts.dtype (default: the compute dtype). hf and fp8 are refused for LoRA runs,
// peft and merged for the others.
// --format hf streams: the weights are read from the checkpoint's state files (one per rank that
// wrote them) and written a bounded block at a time, never whole in memory.
// Returns the dtype written.
io::DType export_run(const std::filesystem::path& run_dir, const std::filesystem::path& out, const ExportOptions& opts);

// "bf16" / "fp16" / "fp32" -> DType; throws UserError naming `what`.
io::DType parse_export_dtype(const std::string& name, const std::string& what);

}  // namespace unstuck::train
