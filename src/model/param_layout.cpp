// Parameter layout (Hugging Face names and shapes, per-family optional tensors) and model-option
// validation. Everything here is plain arithmetic on the config: no tensor is allocated.
#include "unstuck/model/param_layout.h"

#include <cmath>
#include <string>

#include "unstuck/common/error.h"

namespace unstuck::model {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw UserError(message);
}

// a * b, or -1 when it would exceed kMaxParams (inputs are validated positive and <= kMaxParams).
int64_t capped_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kMaxParams / b ? -1 : a * b;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = n < 0 ? -1 : capped_mul(n, d);
  return n;
}

// Tensors outside the blocks: embedding, final norm, untied head.
std::vector<std::pair<std::string, std::vector<int64_t>>> outer_tensors(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out{{"model.embed_tokens.weight", {c.vocab_size, c.dim}},
                                                                {"model.norm.weight", {c.dim}}};
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, c.dim}});
  return out;
}

}  // namespace

void validate_model_config(const ModelConfig& c) {
  const auto positive = [](int64_t v, const char* key) {
    require(v > 0 && v <= kMaxParams, std::string("model.") + key + " must be in [1, 2^38], got " + std::to_string(v));
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.dim, "dim");
  positive(c.n_layers, "n_layers");
  positive(c.n_heads, "n_heads");
  positive(c.n_kv_heads, "n_kv_heads");
  positive(c.ffn_dim, "ffn_dim");
  require(c.head_size >= 0 && c.head_size <= kMaxParams,
          "model.head_size must be >= 0 (0 = dim / n_heads), got " + std::to_string(c.head_size));
  if (c.head_size == 0)
    require(c.dim % c.n_heads == 0, "model.n_heads must divide model.dim (" + std::to_string(c.dim) + "), got " +
                                        std::to_string(c.n_heads) + " (or set model.head_size)");
  require(c.head_dim() % 2 == 0, "model.head_size (the per-head width, " + std::to_string(c.head_dim()) +
                                     ") must be even for rotary embeddings");
  require(c.n_heads % c.n_kv_heads == 0, "model.n_kv_heads must divide model.n_heads (" + std::to_string(c.n_heads) +
                                             "), got " + std::to_string(c.n_kv_heads));
  require(c.max_seq_len > 1 && c.max_seq_len <= kMaxParams,
          "model.max_seq_len must be in [2, 2^38], got " + std::to_string(c.max_seq_len));
  require(std::isfinite(c.rope_theta) && c.rope_theta > 0, "model.rope_theta must be > 0");
  require(std::isfinite(c.norm_eps) && c.norm_eps > 0, "model.norm_eps must be > 0");
  require(std::isfinite(c.init_std) && c.init_std > 0, "model.init_std must be > 0");
  require(c.sliding_window >= 0, "model.sliding_window must be >= 0 (0 = unlimited)");
  const RopeScaling& r = c.rope_scaling;
  if (r.type != RopeType::none)
    require(std::isfinite(r.factor) && r.factor >= 1.0, "model.rope_scaling.factor must be >= 1");
  if (r.type == RopeType::llama3) {
    require(std::isfinite(r.low_freq_factor) && std::isfinite(r.high_freq_factor) &&
                r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0,
            "model.rope_scaling: llama3 needs 0 < low_freq_factor < high_freq_factor");
    require(r.original_max_len > 0, "model.rope_scaling.original_max_len must be > 0");
  }
  if (r.type == RopeType::yarn) {
    require(r.original_max_len > 0, "model.rope_scaling.original_max_len must be > 0");
    require(std::isfinite(r.beta_fast) && std::isfinite(r.beta_slow) && r.beta_fast > r.beta_slow && r.beta_slow > 0,
            "model.rope_scaling: yarn needs 0 < beta_slow < beta_fast");
    require(std::isfinite(r.attention_factor) && r.attention_factor >= 0,
            "model.rope_scaling.attention_factor must be >= 0");
  }
  // The feature set must be one the family has, so an export is what transformers computes too.
  const char* family = c.family == Family::llama   ? "llama"
                       : c.family == Family::qwen2 ? "qwen2"
                       : c.family == Family::qwen3 ? "qwen3"
                                                   : "mistral";
  require(c.qk_norm == (c.family == Family::qwen3), std::string("model.qk_norm is ") + (c.qk_norm ? "true" : "false") +
                                                        " but model.family is " + family +
                                                        " (q/k norms are Qwen3's, and Qwen3 always has them)");
  if (c.family == Family::qwen2)
    require(c.qkv_bias && !c.o_bias, "model.family qwen2 needs model.qkv_bias true and model.o_bias false");
  if (c.family == Family::llama || c.family == Family::qwen3)
    require(c.qkv_bias == c.o_bias, std::string("model.family ") + family +
                                        " has biases on all of q/k/v/o or none: set model.qkv_bias = model.o_bias");
  if (c.family == Family::mistral) require(!c.qkv_bias && !c.o_bias, "model.family mistral has no attention biases");
  require(c.sliding_window == 0 || c.family == Family::mistral, "model.sliding_window needs model.family mistral");
  const int64_t count = parameter_count(c);
  require(count > 0, "model: the configuration describes more than 2^38 parameters (vocab_size " +
                         std::to_string(c.vocab_size) + ", dim " + std::to_string(c.dim) + ", n_layers " +
                         std::to_string(c.n_layers) + ", ffn_dim " + std::to_string(c.ffn_dim) +
                         "); is a number mistyped?");
}

std::vector<LayerTensor> layer_tensors(const ModelConfig& c) {
  const int64_t hd = c.head_dim(), q = c.n_heads * hd, kv = c.n_kv_heads * hd;
  std::vector<LayerTensor> t{{"input_layernorm.weight", {c.dim}, false},
                             {"self_attn.q_proj.weight", {q, c.dim}, true},
                             {"self_attn.k_proj.weight", {kv, c.dim}, true},
                             {"self_attn.v_proj.weight", {kv, c.dim}, true}};
  if (c.qkv_bias) {
    t.push_back({"self_attn.q_proj.bias", {q}, false});
    t.push_back({"self_attn.k_proj.bias", {kv}, false});
    t.push_back({"self_attn.v_proj.bias", {kv}, false});
  }
  if (c.qk_norm) {
    t.push_back({"self_attn.q_norm.weight", {hd}, false});
    t.push_back({"self_attn.k_norm.weight", {hd}, false});
  }
  t.push_back({"self_attn.o_proj.weight", {c.dim, q}, true});
  if (c.o_bias) t.push_back({"self_attn.o_proj.bias", {c.dim}, false});
  t.push_back({"post_attention_layernorm.weight", {c.dim}, false});
  t.push_back({"mlp.gate_proj.weight", {c.ffn_dim, c.dim}, true});
  t.push_back({"mlp.up_proj.weight", {c.ffn_dim, c.dim}, true});
  t.push_back({"mlp.down_proj.weight", {c.dim, c.ffn_dim}, true});
  return t;
}

int64_t parameter_count(const ModelConfig& c) {
  // Checked arithmetic: any overflow past kMaxParams returns -1.
  for (int64_t v : {c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_dim, c.head_dim()})
    if (v <= 0 || v > kMaxParams) return -1;
  int64_t per_layer = 0;
  for (const LayerTensor& t : layer_tensors(c)) {
    const int64_t n = numel_of(t.shape);
    if (n < 0 || per_layer > kMaxParams - n) return -1;
    per_layer += n;
  }
  int64_t total = capped_mul(per_layer, c.n_layers);
  for (const auto& [name, shape] : outer_tensors(c)) {
    const int64_t n = numel_of(shape);
    if (total < 0 || n < 0 || total > kMaxParams - n) return -1;
    total += n;
  }
  return total;
}

const ParamEntry* ParamLayout::find(const std::string& name) const {
  for (const ParamEntry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<precision::Segment> ParamLayout::segments() const {
  std::vector<precision::Segment> out;
  out.reserve(entries.size());
  for (const ParamEntry& e : entries) out.push_back({uint64_t(e.offset), uint64_t(e.numel), e.decay});
  return out;
}

std::vector<precision::Fp8Matrix> ParamLayout::fp8_matrices() const {
  std::vector<precision::Fp8Matrix> out;
  uint64_t rows = 0;
  for (const ParamEntry& e : entries) {
    if (e.shape.size() != 2 || e.name.rfind("model.layers.", 0) != 0) continue;
    out.push_back({uint64_t(e.offset), uint64_t(e.shape[0]), uint64_t(e.shape[1]), rows});
    rows += uint64_t(e.shape[0]);
  }
  return out;
}

ParamLayout llama_layout(const ModelConfig& c) {
  validate_model_config(c);
  ParamLayout layout;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    const int64_t numel = numel_of(shape);
    layout.entries.push_back({std::move(name), std::move(shape), layout.total, numel, decay});
    layout.total += (numel + kParamAlign - 1) / kParamAlign * kParamAlign;
  };
  const auto outer = outer_tensors(c);
  add(outer[0].first, outer[0].second, false);  // embedding
  const std::vector<LayerTensor> layer = layer_tensors(c);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const LayerTensor& t : layer) add(p + t.suffix, t.shape, t.decay);
  }
  add(outer[1].first, outer[1].second, false);                       // final norm
  if (outer.size() > 2) add(outer[2].first, outer[2].second, true);  // untied head
  return layout;
}

}  // namespace unstuck::model
