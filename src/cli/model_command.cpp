// `unstuck inspect MODEL_DIR` (what a Hugging Face model directory is and whether Unstuck computes
// it, without loading weights) and `unstuck export --run RUN_DIR ...` (a GRPO checkpoint as a model
// directory that transformers and inference servers load).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/param_layout.h"
#include "unstuck/train/model_export.h"

namespace unstuck::cli {
namespace {

namespace fs = std::filesystem;

std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string number(double x) {
  std::ostringstream s;
  s << std::setprecision(10) << x;
  return s.str();
}

std::string rope_text(const model::ModelConfig& c) {
  const model::RopeScaling& r = c.rope_scaling;
  std::string s = "theta " + number(c.rope_theta);
  if (r.type == model::RopeType::none) return s;
  s += std::string(", ") + config::enum_name(r.type) + " scaling x" + number(r.factor);
  if (r.type != model::RopeType::linear) s += " from " + std::to_string(r.original_max_len) + " positions";
  return s;
}

// Prints the report; returns false when Unstuck cannot compute the model (the reason printed).
bool inspect(const fs::path& dir, std::ostream& out) {
  const fs::path config_path = dir / "config.json";
  const nlohmann::json raw = io::read_json_file(config_path);
  out << "model directory: " << dir.string() << "\n";
  out << "model_type: " << (raw.is_object() && raw.contains("model_type") ? raw["model_type"].dump() : "(absent)")
      << "\n";
  model::HfConfig hf;
  try {
    hf = model::parse_hf_config(raw, config_path.string());
  } catch (const UserError& e) {
    out << "supported: no\nreason: " << e.what() << "\n";
    return false;
  }
  const model::ModelConfig& c = hf.model;
  out << "family: " << config::enum_name(c.family) << "\n"
      << "parameters: " << model::parameter_count(c) << "\n"
      << "dtype: " << (hf.dtype.empty() ? "(not stated)" : hf.dtype) << "\n"
      << "vocab: " << c.vocab_size << "\n"
      << "context length: " << c.max_seq_len << "\n"
      << "layers: " << c.n_layers << ", hidden " << c.dim << ", MLP " << c.ffn_dim << "\n"
      << "attention: " << c.n_heads << " query heads, " << c.n_kv_heads << " key/value heads, head_dim " << c.head_dim()
      << (c.sliding_window > 0 ? ", sliding window " + std::to_string(c.sliding_window) : "") << "\n"
      << "rope: " << rope_text(c) << "\n"
      << "tied embeddings: " << yes_no(c.tie_embeddings) << "; q/k/v bias: " << yes_no(c.qkv_bias)
      << "; o bias: " << yes_no(c.o_bias) << "; q/k norm: " << yes_no(c.qk_norm) << "\n";
  const model::ParamLayout layout = model::llama_layout(c);  // the layout is accepted (no weights)
  out << "layout: " << layout.entries.size() << " tensors, flat buffer of " << layout.total << " elements\n";
  const bool has_weights = fs::exists(dir / io::kWeightsFile) || fs::exists(dir / io::kWeightsIndexFile);
  if (!has_weights) {
    out << "weights: none in the directory\n";
  } else {
    try {
      const io::SafetensorsDir weights(dir);
      model::check_weights_match(c, weights, config_path.string());
      std::set<std::string> dtypes;
      for (const std::string& name : weights.names()) dtypes.insert(io::dtype_name(weights.find(name)->dtype));
      std::string list;
      for (const std::string& d : dtypes) list += (list.empty() ? "" : ", ") + d;
      out << "weights: " << weights.source() << " matches the config (" << list << ")\n";
    } catch (const UserError& e) {
      out << "supported: no\nreason: " << e.what() << "\n";
      return false;
    }
  }
  out << "supported: yes\n";
  return true;
}

void add_inspect(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("inspect",
                         "Describe a Hugging Face model directory (family, parameters, dtype, vocabulary, context "
                         "length) and whether Unstuck computes it, without loading its weights; exit 1 when not");
  cmd->add_option("model_dir", *dir, "directory with config.json (and optionally safetensors weights)")->required();
  cmd->callback([dir] {
    if (!inspect(*dir, std::cout)) throw ExitCode{1};
  });
}

void add_export(CLI::App& app) {
  struct Args {
    std::string run, out, dtype, format = "hf", shard_size = "2GB";
    int64_t step = -1;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a GRPO checkpoint as a Hugging Face model directory (config.json, generation_config.json, "
      "sharded safetensors, tokenizer files)");
  cmd->add_option("--run", a->run, "run directory (holds checkpoints/step_N)")->required();
  cmd->add_option("--step", a->step, "checkpoint step (default: the newest)");
  cmd->add_option("--out", a->out, "output directory")->required();
  cmd->add_option("--dtype", a->dtype,
                  "bf16 | fp16 | fp32 (default: the run's compute dtype, whose exact weights are written)");
  cmd->add_option("--format", a->format,
                  "hf: the weights in --dtype (default); fp8 (fp8_rn / fp8_sr runs): the FP8 compute weights as "
                  "compressed-tensors' float-quantized format (E4M3 codes, a BF16 scale per output channel), which "
                  "vLLM and transformers (with the compressed-tensors package) load"
                  "; LoRA runs (lora.rank > 0): peft: the adapters as a PEFT adapter directory (adapter_config.json, "
                  "adapter_model.safetensors) for the base model, or merged: a full model with the adapters merged "
                  "into the run's frozen base");
  cmd->add_option("--shard-size", a->shard_size, "largest safetensors file, e.g. 2GB, 500MB");
  cmd->callback([a] {
    train::ExportOptions opts;
    opts.step = a->step;
    opts.dtype = a->dtype;
    opts.format = a->format;
    opts.shard_bytes = io::parse_byte_size(a->shard_size, "--shard-size");
    const io::DType d = train::export_run(a->run, a->out, opts);
    std::cout << "exported " << a->run << " to " << a->out << " (" << io::dtype_name(d) << ")\n";
  });
}

}  // namespace

void add_model_commands(CLI::App& app) {
  add_inspect(app);
  add_export(app);
}

}  // namespace unstuck::cli
