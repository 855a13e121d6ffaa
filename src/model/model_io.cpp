// Hugging Face Llama model directories: config.json mapping and safetensors weights to and from the
// flat parameter buffer.
#include "unstuck/model/model_io.h"

#include <ATen/ATen.h>

#include <cstring>
#include <set>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::model {
namespace {

template <class T>
T get_key(const nlohmann::json& hf, const char* key, const std::string& source) {
  if (!hf.contains(key)) throw UserError(source + ": missing key '" + key + "'");
  try {
    return hf.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw UserError(source + ": key '" + key + "' has the wrong type (" + hf.at(key).type_name() + ")");
  }
}

torch::ScalarType torch_dtype(io::DType d) {
  switch (d) {
    case io::DType::f32: return torch::kFloat32;
    case io::DType::bf16: return torch::kBFloat16;
    case io::DType::f16: return torch::kHalf;
  }
  return torch::kFloat32;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source) {
  ModelConfig c;
  c.vocab_size = get_key<int64_t>(hf, "vocab_size", source);
  c.dim = get_key<int64_t>(hf, "hidden_size", source);
  c.n_layers = get_key<int64_t>(hf, "num_hidden_layers", source);
  c.n_heads = get_key<int64_t>(hf, "num_attention_heads", source);
  c.n_kv_heads = hf.contains("num_key_value_heads") && !hf["num_key_value_heads"].is_null()
                     ? get_key<int64_t>(hf, "num_key_value_heads", source)
                     : c.n_heads;
  c.ffn_dim = get_key<int64_t>(hf, "intermediate_size", source);
  c.max_seq_len = get_key<int64_t>(hf, "max_position_embeddings", source);
  c.norm_eps = get_key<double>(hf, "rms_norm_eps", source);
  // transformers >= 5 keeps rope_theta inside rope_parameters; older versions at the top level.
  if (hf.contains("rope_parameters") && hf["rope_parameters"].is_object() &&
      hf["rope_parameters"].contains("rope_theta"))
    c.rope_theta = get_key<double>(hf["rope_parameters"], "rope_theta", source + " rope_parameters");
  else if (hf.contains("rope_theta"))
    c.rope_theta = get_key<double>(hf, "rope_theta", source);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!hf.contains(key) || !hf[key].is_object()) continue;
    const auto& r = hf[key];
    const std::string type = r.value("rope_type", r.value("type", std::string("default")));
    if (type != "default")
      throw UserError(source + ": " + key + " type '" + type + "' is not supported (only default RoPE)");
  }
  c.tie_embeddings = hf.value("tie_word_embeddings", false);
  if (hf.contains("head_dim") && !hf["head_dim"].is_null() && hf["head_dim"].get<int64_t>() != c.head_dim())
    throw UserError(source + ": head_dim " + std::to_string(hf["head_dim"].get<int64_t>()) +
                    " differs from hidden_size / num_attention_heads; not supported");
  if (hf.value("attention_bias", false) || hf.value("mlp_bias", false))
    throw UserError(source + ": attention_bias / mlp_bias are not supported");
  validate_model_config(c);
  return c;
}

nlohmann::json model_config_to_hf(const ModelConfig& c, const SpecialTokens& t) {
  nlohmann::json hf = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.dim},
      {"intermediate_size", c.ffn_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"head_dim", c.head_dim()},
      {"max_position_embeddings", c.max_seq_len},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", c.tie_embeddings},
      {"initializer_range", c.init_std},
  };
  if (t.bos >= 0) hf["bos_token_id"] = t.bos;
  if (t.eos >= 0) hf["eos_token_id"] = t.eos;
  if (t.pad >= 0) hf["pad_token_id"] = t.pad;
  return hf;
}

LoadedModel load_pretrained(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  const nlohmann::json hf = io::read_json_file(config_path);
  LoadedModel out;
  out.config = model_config_from_hf(hf, config_path.string());
  out.tokens.bos = hf.value("bos_token_id", -1);
  out.tokens.eos = hf.value("eos_token_id", -1);
  out.tokens.pad = hf.value("pad_token_id", -1);

  const std::filesystem::path weights_path = dir / "model.safetensors";
  const io::SafetensorsFile file = io::read_safetensors(weights_path);
  const ParamLayout layout = llama_layout(out.config);
  out.flat = torch::zeros({layout.total}, torch::kFloat32);
  std::set<std::string> used;
  for (const ParamEntry& e : layout.entries) {
    const io::Tensor* t = file.find(e.name);
    if (!t) throw UserError(weights_path.string() + ": missing tensor '" + e.name + "'");
    if (t->shape != e.shape)
      throw UserError(weights_path.string() + ": tensor '" + e.name + "' has shape " +
                      shape_text(t->shape) + ", expected " + shape_text(e.shape));
    const torch::Tensor src = torch::from_blob(const_cast<uint8_t*>(t->bytes.data()), e.shape,
                                               torch_dtype(t->dtype));
    out.flat.narrow(0, e.offset, e.numel).copy_(src.reshape({-1}));
    used.insert(e.name);
  }
  for (const io::Tensor& t : file.tensors) {
    // A tied checkpoint may still carry the (identical) output head; anything else is a mismatch.
    if (used.count(t.name) || (out.config.tie_embeddings && t.name == "lm_head.weight")) continue;
    throw UserError(weights_path.string() + ": unexpected tensor '" + t.name +
                    "' (not part of a Llama model with this config.json)");
  }
  return out;
}

void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config,
                     const torch::Tensor& flat_fp32, io::DType dtype, const SpecialTokens& tokens) {
  const ParamLayout layout = llama_layout(config);
  if (flat_fp32.scalar_type() != torch::kFloat32 || flat_fp32.numel() != layout.total)
    throw UserError("save_pretrained: expected an FP32 flat buffer of " + std::to_string(layout.total) +
                    " elements");
  std::filesystem::create_directories(dir);
  const torch::Tensor converted = flat_fp32.detach().contiguous().to(torch_dtype(dtype));
  const auto elem = converted.element_size();
  const char* base = static_cast<const char*>(converted.data_ptr());
  std::vector<io::TensorView> views;
  for (const ParamEntry& e : layout.entries)
    views.push_back({e.name, dtype, e.shape, base + e.offset * elem, std::size_t(e.numel) * elem});
  io::write_safetensors(dir / "model.safetensors", views, {{"format", "pt"}});
  io::write_json_file(dir / "config.json", model_config_to_hf(config, tokens));
}

}  // namespace unstuck::model
