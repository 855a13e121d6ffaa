// Export of trained weights as a Hugging Face model directory (config.json from the run's model
// config, special tokens and tokenizer files from the base policy directory).
#include "unstuck/train/model_export.h"

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/model_io.h"
#include "train/base_weights.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/train/run_setup.h"
#include "unstuck/train/sft.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

// checkpoints/step_<N, zero-padded> for `step`, or an empty path.
fs::path checkpoint_of_step(const fs::path& checkpoints, int64_t step) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 23 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    if (std::stoll(name.substr(5)) == step) return e.path();
  }
  return {};
}

bool has_tokenizer(const fs::path& dir) {
  return fs::is_regular_file(dir / "tokenizer.json") || fs::is_regular_file(dir / "tokenizer.model");
}

// The special tokens of the run's base policy (none without its config.json).
model::SpecialTokens base_tokens(const RunConfig& config) {
  const fs::path base = config.grpo.base_model;
  if (!base.empty() && fs::exists(base / "config.json")) return model::read_hf_config(base / "config.json").tokens;
  return {};
}

// Everything of a model directory but its weights and config.json: generation_config.json, the
// tokenizer files and the run's config.yaml.
void write_model_extras(const fs::path& out, const RunConfig& config, const model::SpecialTokens& tokens) {
  nlohmann::json gen = {{"_from_model_config", true}};
  if (tokens.bos >= 0) gen["bos_token_id"] = tokens.bos;
  if (tokens.eos_ids.size() > 1)
    gen["eos_token_id"] = tokens.eos_ids;
  else if (tokens.eos >= 0)
    gen["eos_token_id"] = tokens.eos;
  if (tokens.pad >= 0) gen["pad_token_id"] = tokens.pad;
  io::write_json_file(out / "generation_config.json", gen);
  // The base's own tokenizer files when it has them (transformers loads them unchanged), else the
  // run's tokenizer.
  const fs::path base = config.grpo.base_model;
  const fs::path tok =
      !base.empty() && fs::is_directory(base) && has_tokenizer(base) ? base : fs::path(config.tokenizer.path);
  if (!tok.empty()) tokenizer::copy_tokenizer_files(tok, out);
  std::ofstream(out / kRunConfigFile) << resolved_yaml(config);
}

// --format fp8: compressed-tensors' "float-quantized" format, weight-only FP8 with one scale per
// output channel (what vLLM and transformers with the compressed-tensors package load): the linear
// layers' weights as E4M3FN codes, `<name>_scale` (rows, 1) BF16 holding 2^e, every other tensor
// BF16. code x scale is the run's compute weight bit for bit (the codes are fp8_e4m3_code of it).
nlohmann::json fp8_quantization_config() {
  const nlohmann::json weights = {
      {"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "channel"}, {"dynamic", false}};
  const nlohmann::json group = {{"targets", nlohmann::json::array({"Linear"})},
                                {"weights", weights},
                                {"input_activations", nullptr},
                                {"output_activations", nullptr}};
  return {{"quant_method", "compressed-tensors"},         {"format", "float-quantized"},
          {"quantization_status", "compressed"},          {"config_groups", {{"group_0", group}}},
          {"ignore", nlohmann::json::array({"lm_head"})}, {"kv_cache_scheme", nullptr}};
}

void write_fp8_model_dir(const fs::path& out, const RunConfig& config, const torch::Tensor& compute,
                         const Fp8Channels& channels, uint64_t shard_bytes) {
  const model::SpecialTokens tokens = base_tokens(config);  // before anything is written, as it can fail
  model::save_fp8_weights(out, model::llama_layout(config.model), static_cast<const uint16_t*>(compute.data_ptr()),
                          channels, shard_bytes);
  nlohmann::json cfg = model::hf_config_json(config.model, tokens, "bfloat16");
  cfg["quantization_config"] = fp8_quantization_config();
  io::write_json_file(out / "config.json", cfg);
  write_model_extras(out, config, tokens);
}

}  // namespace

io::DType parse_export_dtype(const std::string& name, const std::string& what) {
  if (name == "bf16") return io::DType::bf16;
  if (name == "fp16") return io::DType::f16;
  if (name == "fp32") return io::DType::f32;
  throw UserError(what + " must be bf16, fp16 or fp32, got '" + name + "'");
}

void write_model_dir(const fs::path& out, const RunConfig& config, const torch::Tensor& flat, io::DType dtype,
                     uint64_t shard_bytes) {
  const model::SpecialTokens tokens = base_tokens(config);
  model::save_pretrained(out, config.model, flat, dtype, tokens, shard_bytes);
  write_model_extras(out, config, tokens);
}

void write_final_model(const fs::path& run_dir, const RunConfig& config, const torch::Tensor& compute,
                       const torch::Tensor& pissa_start) {
  if (config.lora.enabled()) {
    const model::LoraSpec spec = model::lora_spec(config.lora);
    if (pissa_start.defined()) {  // rank 2r on the original base (model::pissa_as_lora)
      const model::LoadedAdapter a = model::pissa_as_lora(config.model, spec, compute, pissa_start);
      model::save_peft_adapter(run_dir / "final_adapter", config.model, a.spec, a.flat, config.grpo.base_model);
      return;
    }
    model::save_peft_adapter(run_dir / "final_adapter", config.model, spec, compute, config.grpo.base_model);
    return;
  }
  write_model_dir(run_dir / "final_model", config, compute, model::io_dtype(compute.scalar_type()));
}

namespace {

// Throws UserError when opts.format (and --dtype) cannot export this run: an unknown format, hf or
// fp8 for LoRA, peft or merged without it, fp8 for a run off the FP8 grid or with another dtype.
void check_export_format(const fs::path& run_dir, const RunConfig& config, const ExportOptions& opts, io::DType compute,
                         io::DType dtype) {
  const bool fp8_coded = opts.format == "fp8", lora = config.lora.enabled();
  const bool peft = opts.format == "peft", merged = opts.format == "merged";
  if (!fp8_coded && !peft && !merged && opts.format != "hf")
    throw UserError("export: --format must be hf, fp8, peft or merged, got '" + opts.format + "'");
  if (lora && !peft && !merged)
    throw UserError("export: run '" + run_dir.string() + "' trained LoRA adapters (lora.rank " +
                    std::to_string(config.lora.rank) +
                    "): use --format peft (the adapters, for peft) or --format "
                    "merged (a full model with them merged in), not --format " +
                    opts.format);
  if (!lora && (peft || merged))
    throw UserError("export --format " + opts.format + ": run '" + run_dir.string() +
                    "' trained every parameter (lora.rank 0), it has no adapters; use --format hf");
  if (fp8_coded && !precision::is_fp8(config.precision.mode))
    throw UserError("export --format fp8: the run's precision.mode is " +
                    std::string(config::enum_name(config.precision.mode)) +
                    ", not fp8_rn or fp8_sr (its weights are not on an FP8 grid); use --format hf");
  if (fp8_coded && dtype != compute)
    throw UserError("export --format fp8 writes the run's FP8 compute weights; drop --dtype " + opts.dtype);
}

}  // namespace

io::DType export_run(const fs::path& run_dir, const fs::path& out, const ExportOptions& opts) {
  const fs::path ckpt = opts.step >= 0 ? checkpoint_of_step(run_dir / "checkpoints", opts.step)
                                       : latest_checkpoint(run_dir / "checkpoints");
  if (ckpt.empty() || !fs::exists(ckpt / "manifest.json"))
    throw UserError("export: no checkpoint " +
                    (opts.step >= 0 ? "for step " + std::to_string(opts.step) + " " : std::string()) + "in '" +
                    (run_dir / "checkpoints").string() + "'");
  const TrainerState st = load_checkpoint(ckpt, CheckpointBuffers::defer);
  RunConfig config;
  config::load_yaml_string(config::bind(config), st.config_yaml, (ckpt / kRunConfigFile).string());
  validate(config);
  // The compute weights of that step, regenerated a slice at a time exactly as the run did on resume
  // (the forward's dtype, precision.compute, does not change them); or the FP32 master (--dtype
  // fp32), or the master rounded to nearest into another dtype. Memory (--format hf): one slice and
  // one 64 MiB block of the file being written, read across the checkpoint's shards; the other
  // formats hold their output whole.
  const io::DType compute = model::io_dtype(compute_dtype(precision::round_mode_for(config.precision.mode)));
  const io::DType dtype = opts.dtype.empty() ? compute : parse_export_dtype(opts.dtype, "--dtype");
  const bool fp8_coded = opts.format == "fp8", lora = config.lora.enabled();
  const bool peft = opts.format == "peft", merged = opts.format == "merged";
  check_export_format(run_dir, config, opts, compute, dtype);
  const uint64_t seed = derive_seeds(config.run.seed).rounding;
  // merged: the adapters' compute weights (what the run computed with) whatever the output dtype.
  const io::DType flat_dtype = merged ? compute : dtype;
  // FP8 modes: the channel exponents of the checkpoint's master (one pass over it first).
  std::unique_ptr<Fp8Channels> fp8;
  if (dtype == compute && precision::is_fp8(config.precision.mode))
    fp8 = std::make_unique<Fp8Channels>(precision::fp8_channels(
        model::llama_layout(config.model).fp8_matrices(), model::llama_layout(config.model).total,
        [&](int64_t b, int64_t n, float* out) { read_checkpoint_buffer(st, "master", b, n, out); },
        config.precision.threads));
  // Elements [b, b + n) of the weights to write, in flat_dtype, into `out`: read from the
  // checkpoint's state files and rounded a slice at a time.
  constexpr int64_t kSlice = 1 << 22;
  torch::Tensor master = torch::empty({std::min(kSlice, st.elements)}, torch::kFloat32);
  const std::size_t elem = io::dtype_size(flat_dtype);
  const auto fill = [&](int64_t b, int64_t n, void* out) {
    for (int64_t at = 0; at < n; at += kSlice) {
      const int64_t m = std::min(kSlice, n - at);
      char* dst = static_cast<char*>(out) + at * int64_t(elem);
      if (flat_dtype == io::DType::f32) {  // the master (in fp32 mode also the compute weights)
        read_checkpoint_buffer(st, "master", b + at, m, reinterpret_cast<float*>(dst));
        continue;
      }
      read_checkpoint_buffer(st, "master", b + at, m, master.data_ptr<float>());
      if (flat_dtype == compute)
        materialize_compute_slice(config.precision, seed, master.data_ptr<float>(), b + at, m, dst, st.optimizer_steps,
                                  fp8.get());
      else
        torch::from_blob(dst, {m}, model::torch_dtype(flat_dtype)).copy_(master.narrow(0, 0, m));
    }
  };
  if (!fp8_coded && !lora) {  // hf: streamed into the files, never whole in memory
    const model::SpecialTokens tokens = base_tokens(config);
    model::save_pretrained(out, config.model, model::FlatFill(fill), dtype, tokens, opts.shard_bytes);
    write_model_extras(out, config, tokens);
    return dtype;
  }
  torch::Tensor flat = torch::empty({st.elements}, model::torch_dtype(flat_dtype));
  fill(0, st.elements, flat.data_ptr());
  if (fp8_coded) {
    write_fp8_model_dir(out, config, flat, *fp8, opts.shard_bytes);
    return io::DType::f8_e4m3;
  }
  const bool pissa = lora && config.lora.init == model::LoraInit::pissa && config.grpo.base_adapter.empty();
  const uint64_t init_seed = derive_seeds(config.run.seed).init;  // the run's seeds.init
  const auto base_weights = [&] {
    const fs::path base = config.grpo.base_model;
    return load_base_weights(config, base, model::read_hf_config(base / "config.json"));
  };
  if (peft) {
    const model::LoraSpec spec = model::lora_spec(config.lora);
    if (pissa) {  // the start adapters again (the SVD of the base, as the run took it), then rank 2r on the original
                  // base
      torch::Tensor base = base_weights();
      const model::LoadedAdapter a =
          model::pissa_as_lora(config.model, spec, flat, start_adapters(config, init_seed, base));
      model::save_peft_adapter(out, config.model, a.spec, a.flat, config.grpo.base_model);
    } else {
      model::save_peft_adapter(out, config.model, spec, flat, config.grpo.base_model);
    }
    std::ofstream(out / kRunConfigFile) << resolved_yaml(config);
    return dtype;
  }
  if (merged) {
    torch::Tensor base = base_weights();
    if (pissa) start_adapters(config, init_seed, base);  // the residual the run trained on
    const torch::Tensor frozen = frozen_base_weights(std::move(base), config.precision, torch::kFloat32);
    write_model_dir(out, config, model::merge_lora(config.model, frozen, model::lora_spec(config.lora), flat), dtype,
                    opts.shard_bytes);
    return dtype;
  }
  write_model_dir(out, config, flat, dtype, opts.shard_bytes);
  return dtype;
}

}  // namespace unstuck::train
