// Llama parameter layout (Hugging Face names and shapes) and model-option validation.
#include "unstuck/model/param_layout.h"

#include <string>

#include "unstuck/common/error.h"

namespace unstuck::model {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw UserError(message);
}

}  // namespace

void validate_model_config(const ModelConfig& c) {
  require(c.vocab_size > 0, "model.vocab_size must be > 0, got " + std::to_string(c.vocab_size));
  require(c.dim > 0, "model.dim must be > 0, got " + std::to_string(c.dim));
  require(c.n_layers > 0, "model.n_layers must be > 0, got " + std::to_string(c.n_layers));
  require(c.n_heads > 0 && c.dim % c.n_heads == 0,
          "model.n_heads must divide model.dim (" + std::to_string(c.dim) + "), got " +
              std::to_string(c.n_heads));
  require(c.head_dim() % 2 == 0, "model.dim / model.n_heads must be even for rotary embeddings");
  require(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0,
          "model.n_kv_heads must divide model.n_heads (" + std::to_string(c.n_heads) + "), got " +
              std::to_string(c.n_kv_heads));
  require(c.ffn_dim > 0, "model.ffn_dim must be > 0, got " + std::to_string(c.ffn_dim));
  require(c.max_seq_len > 1, "model.max_seq_len must be > 1, got " + std::to_string(c.max_seq_len));
  require(c.rope_theta > 0, "model.rope_theta must be > 0");
  require(c.norm_eps > 0, "model.norm_eps must be > 0");
  require(c.init_std > 0, "model.init_std must be > 0");
}

const ParamEntry* ParamLayout::find(const std::string& name) const {
  for (const ParamEntry& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<precision::Segment> ParamLayout::segments() const {
  std::vector<precision::Segment> out;
  out.reserve(entries.size());
  for (const ParamEntry& e : entries)
    out.push_back({uint64_t(e.offset), uint64_t(e.numel), e.decay});
  return out;
}

ParamLayout llama_layout(const ModelConfig& c) {
  validate_model_config(c);
  ParamLayout layout;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    layout.entries.push_back({std::move(name), std::move(shape), layout.total, numel, decay});
    layout.total += (numel + kParamAlign - 1) / kParamAlign * kParamAlign;
  };
  const int64_t q = c.n_heads * c.head_dim(), kv = c.n_kv_heads * c.head_dim();
  add("model.embed_tokens.weight", {c.vocab_size, c.dim}, false);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {c.dim}, false);
    add(p + "self_attn.q_proj.weight", {q, c.dim}, true);
    add(p + "self_attn.k_proj.weight", {kv, c.dim}, true);
    add(p + "self_attn.v_proj.weight", {kv, c.dim}, true);
    add(p + "self_attn.o_proj.weight", {c.dim, q}, true);
    add(p + "post_attention_layernorm.weight", {c.dim}, false);
    add(p + "mlp.gate_proj.weight", {c.ffn_dim, c.dim}, true);
    add(p + "mlp.up_proj.weight", {c.ffn_dim, c.dim}, true);
    add(p + "mlp.down_proj.weight", {c.dim, c.ffn_dim}, true);
  }
  add("model.norm.weight", {c.dim}, false);
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab_size, c.dim}, true);
  return layout;
}

}  // namespace unstuck::model
