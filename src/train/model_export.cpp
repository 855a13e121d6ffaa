// Export of trained weights as a Hugging Face model directory (config.json from the run's model
// config, special tokens and tokenizer files from the base policy directory).
#include "unstuck/train/model_export.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/train/run_setup.h"
#include "unstuck/train/sft.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

io::DType dtype_of(torch::ScalarType t) {
  return t == torch::kBFloat16 ? io::DType::bf16 : t == torch::kHalf ? io::DType::f16 : io::DType::f32;
}

// checkpoints/step_<N, zero-padded> for `step`, or an empty path.
fs::path checkpoint_of_step(const fs::path& checkpoints, int64_t step) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 23 || name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    if (std::stoll(name.substr(5)) == step) return e.path();
  }
  return {};
}

bool has_tokenizer(const fs::path& dir) {
  return fs::is_regular_file(dir / "tokenizer.json") || fs::is_regular_file(dir / "tokenizer.model");
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
  const fs::path base = config.grpo.base_model;
  model::SpecialTokens tokens;
  if (!base.empty() && fs::exists(base / "config.json")) tokens = model::read_hf_config(base / "config.json").tokens;
  model::save_pretrained(out, config.model, flat, dtype, tokens, shard_bytes);
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
  const fs::path tok = !base.empty() && fs::is_directory(base) && has_tokenizer(base) ? base : fs::path(config.tokenizer.path);
  if (!tok.empty()) tokenizer::copy_tokenizer_files(tok, out);
  std::ofstream(out / kRunConfigFile) << resolved_yaml(config);
}

void write_final_model(const fs::path& run_dir, const RunConfig& config, const torch::Tensor& compute) {
  write_model_dir(run_dir / "final_model", config, compute, dtype_of(compute.scalar_type()));
}

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
  // fp32), or the master rounded to nearest into another dtype. Memory: the output and one slice.
  const io::DType compute = dtype_of(compute_dtype(precision::round_mode_for(config.precision.mode)));
  const io::DType dtype = opts.dtype.empty() ? compute : parse_export_dtype(opts.dtype, "--dtype");
  const uint64_t seed = derive_seeds(config.run.seed).rounding;
  torch::Tensor flat = torch::empty({st.elements}, model::torch_dtype(dtype));
  // FP8 modes: the channel exponents of the checkpoint's master (one pass over it first).
  std::unique_ptr<Fp8Channels> fp8;
  if (dtype == compute && precision::is_fp8(config.precision.mode))
    fp8 = std::make_unique<Fp8Channels>(fp8_channels(
        model::llama_layout(config.model),
        [&](int64_t b, int64_t n, float* out) { read_checkpoint_buffer(st, "master", b, n, out); }, config.precision.threads));
  constexpr int64_t kSlice = 1 << 22;
  torch::Tensor master = torch::empty({std::min(kSlice, st.elements)}, torch::kFloat32);
  for (int64_t b = 0; b < st.elements; b += kSlice) {
    const int64_t n = std::min(kSlice, st.elements - b);
    if (dtype == io::DType::f32) {
      read_checkpoint_buffer(st, "master", b, n, flat.data_ptr<float>() + b);
      continue;
    }
    read_checkpoint_buffer(st, "master", b, n, master.data_ptr<float>());
    if (dtype == compute)
      materialize_compute_slice(config.precision, seed, master.data_ptr<float>(), b, n,
                                static_cast<char*>(flat.data_ptr()) + b * flat.element_size(), st.optimizer_steps,
                                fp8.get());
    else
      flat.narrow(0, b, n).copy_(master.narrow(0, 0, n));
  }
  write_model_dir(out, config, flat, dtype, opts.shard_bytes);
  return dtype;
}

}  // namespace unstuck::train
