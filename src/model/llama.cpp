// Llama-family forward passes (full and KV-cached) on named parameters that view one flat buffer.
// Shapes use B batch, T new tokens, Tk attended keys, H query heads, G kv heads, hd head size, D
// model width, F MLP width.
#include "unstuck/model/llama.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <stdexcept>
#include <tuple>

#include "unstuck/common/error.h"

namespace unstuck::model {
namespace {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // As Hugging Face: normalize in FP32, cast back, then scale.
  const torch::Tensor h = x.to(torch::kFloat32);
  const torch::Tensor normed = h * torch::rsqrt(h.pow(2).mean(-1, true) + eps);
  return weight * normed.to(x.scalar_type());
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Positions of tokens: count of real tokens before each one (so left padding does not shift them).
torch::Tensor positions_from_valid(const torch::Tensor& valid, const torch::Tensor& start) {
  torch::Tensor pos = valid.to(torch::kLong).cumsum(1) - 1;  // (B, T)
  pos = pos.clamp_min(0);
  return start.defined() ? pos + start.unsqueeze(1) : pos;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

}  // namespace

std::pair<torch::Tensor, double> rope_inv_freq(const ModelConfig& c) {
  const int64_t hd = c.head_dim();
  torch::Tensor inv = (1.0 / torch::pow(c.rope_theta, torch::arange(0, hd, 2, torch::kFloat64) / double(hd)))
                          .to(torch::kFloat32);  // (hd/2)
  const RopeScaling& r = c.rope_scaling;
  double attention = 1.0;
  switch (r.type) {
    case RopeType::none: break;
    case RopeType::linear: inv = inv / r.factor; break;
    case RopeType::llama3: {
      // Long wavelengths are divided by `factor`, short ones kept, the band between interpolated.
      const double old_len = double(r.original_max_len);
      const double low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
      const torch::Tensor wavelen = 2 * M_PI / inv;
      torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv / r.factor, inv);
      const torch::Tensor smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      const torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
      const torch::Tensor medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen);
      inv = torch::where(medium, smoothed, scaled);
      break;
    }
    case RopeType::yarn: {
      // YaRN (arXiv 2309.00071): interpolate low frequencies, keep high ones, a linear ramp between
      // the dimensions that rotate beta_fast and beta_slow times over the original context.
      const double base = c.rope_theta, dim = double(hd);
      const auto correction_dim = [&](double rotations) {
        return dim * std::log(double(r.original_max_len) / (rotations * 2 * M_PI)) / (2 * std::log(base));
      };
      const double low = std::max(std::floor(correction_dim(r.beta_fast)), 0.0);
      double high = std::min(std::ceil(correction_dim(r.beta_slow)), dim - 1);
      if (low == high) high += 0.001;
      const torch::Tensor pos_freqs = torch::pow(base, torch::arange(0, hd, 2).to(torch::kFloat32) / dim);
      const torch::Tensor extrapolation = 1.0 / pos_freqs, interpolation = 1.0 / (r.factor * pos_freqs);
      const torch::Tensor ramp = ((torch::arange(hd / 2, torch::kFloat32) - low) / (high - low)).clamp(0, 1);
      const torch::Tensor keep = 1 - ramp;
      inv = interpolation * (1 - keep) + extrapolation * keep;
      attention = r.attention_factor > 0 ? r.attention_factor : (r.factor <= 1 ? 1.0 : 0.1 * std::log(r.factor) + 1.0);
      break;
    }
  }
  return {inv, attention};
}

const torch::Tensor& LlamaModel::param(const std::string& name) const {
  const ParamEntry* e = layout_.find(name);
  if (!e) throw std::logic_error("model layout has no tensor " + name);
  return params_[std::size_t(e - layout_.entries.data())];
}

LlamaModel::LlamaModel(const ModelConfig& config, torch::Tensor flat_weights)
    : config_(config), layout_(llama_layout(config)), flat_(std::move(flat_weights)) {
  if (flat_.dim() != 1 || flat_.numel() != layout_.total)
    throw UserError("model weights: expected a flat buffer of " + std::to_string(layout_.total) +
                    " elements, got " + std::to_string(flat_.numel()));
  if (!flat_.is_contiguous()) throw UserError("model weights: the flat buffer must be contiguous");
  const auto elem = flat_.element_size();
  char* base = static_cast<char*>(flat_.data_ptr());
  for (const ParamEntry& e : layout_.entries)
    params_.push_back(torch::from_blob(base + e.offset * elem, e.shape, flat_.options()));
  std::tie(inv_freq_, rope_attention_) = rope_inv_freq(config_);
  // Name every tensor once; a family's optional parts stay undefined when its layout lacks them.
  embed_ = param("model.embed_tokens.weight");
  final_norm_ = param("model.norm.weight");
  head_ = config_.tie_embeddings ? embed_ : param("lm_head.weight");
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const auto opt = [&](const char* suffix) {
      return layout_.find(p + suffix) ? param(p + suffix) : torch::Tensor();
    };
    LayerWeights w;
    w.attn_norm = param(p + "input_layernorm.weight");
    w.wq = param(p + "self_attn.q_proj.weight");
    w.wk = param(p + "self_attn.k_proj.weight");
    w.wv = param(p + "self_attn.v_proj.weight");
    w.wo = param(p + "self_attn.o_proj.weight");
    w.bq = opt("self_attn.q_proj.bias");
    w.bk = opt("self_attn.k_proj.bias");
    w.bv = opt("self_attn.v_proj.bias");
    w.bo = opt("self_attn.o_proj.bias");
    w.q_norm = opt("self_attn.q_norm.weight");
    w.k_norm = opt("self_attn.k_norm.weight");
    w.mlp_norm = param(p + "post_attention_layernorm.weight");
    w.w_gate = param(p + "mlp.gate_proj.weight");
    w.w_up = param(p + "mlp.up_proj.weight");
    w.w_down = param(p + "mlp.down_proj.weight");
    layers_.push_back(std::move(w));
  }
}

void LlamaModel::set_requires_grad(bool requires_grad) {
  for (torch::Tensor& p : params_) p.set_requires_grad(requires_grad);
}

torch::Tensor LlamaModel::run(const torch::Tensor& tokens, const torch::Tensor& positions,
                              const torch::Tensor& mask, KVCache* cache) const {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t H = config_.n_heads, G = config_.n_kv_heads, hd = config_.head_dim();
  const auto dtype = flat_.scalar_type();
  torch::Tensor x = at::embedding(embed_, tokens);  // (B, T, D)

  // Rotary tables as Hugging Face builds them: FP32 angles (times yarn's attention factor), cast to
  // the compute dtype.
  const torch::Tensor freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq_;  // (B, T, hd/2)
  const torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);                // (B, 1, T, hd)
  const torch::Tensor cos = (emb.cos() * rope_attention_).to(dtype), sin = (emb.sin() * rope_attention_).to(dtype);

  torch::Tensor attn_mask = mask;
  if (config_.sliding_window > 0) {
    // Mistral: a query sees keys fewer than `sliding_window` positions back (itself included).
    const torch::Tensor key_pos = cache ? cache->key_position.narrow(1, 0, cache->length + T) : positions;  // (B, Tk)
    const torch::Tensor near = (positions.unsqueeze(2) - key_pos.unsqueeze(1)) < config_.sliding_window;  // (B, T, Tk)
    attn_mask = attn_mask & near.unsqueeze(1);
  }

  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const LayerWeights& w = layers_[std::size_t(layer)];
    const torch::Tensor h = rms_norm(x, w.attn_norm, config_.norm_eps);
    torch::Tensor q = linear(h, w.wq, w.bq).view({B, T, H, hd});  // (B, T, H, hd)
    torch::Tensor k = linear(h, w.wk, w.bk).view({B, T, G, hd});  // (B, T, G, hd)
    if (w.q_norm.defined()) {  // Qwen3: RMSNorm over each head's hd values, before RoPE
      q = rms_norm(q, w.q_norm, config_.norm_eps);
      k = rms_norm(k, w.k_norm, config_.norm_eps);
    }
    q = q.transpose(1, 2);  // (B, H, T, hd)
    k = k.transpose(1, 2);  // (B, G, T, hd)
    torch::Tensor v = linear(h, w.wv, w.bv).view({B, T, G, hd}).transpose(1, 2);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    if (cache) {
      cache->k[layer].narrow(2, cache->length, T).copy_(k);
      cache->v[layer].narrow(2, cache->length, T).copy_(v);
      k = cache->k[layer].narrow(2, 0, cache->length + T);  // (B, G, Tk, hd)
      v = cache->v[layer].narrow(2, 0, cache->length + T);
    }
    if (G != H) {
      k = k.repeat_interleave(H / G, 1);
      v = v.repeat_interleave(H / G, 1);
    }
    const torch::Tensor attn = at::scaled_dot_product_attention(q, k, v, attn_mask);  // (B, H, T, hd)
    x = x + linear(attn.transpose(1, 2).reshape({B, T, H * hd}), w.wo, w.bo);
    const torch::Tensor h2 = rms_norm(x, w.mlp_norm, config_.norm_eps);
    x = x + at::linear(torch::silu(at::linear(h2, w.w_gate)) * at::linear(h2, w.w_up), w.w_down);  // (B, T, D)
  }
  x = rms_norm(x, final_norm_, config_.norm_eps);
  return at::linear(x, head_).to(torch::kFloat32);  // (B, T, V)
}

torch::Tensor LlamaModel::forward(const torch::Tensor& tokens, const torch::Tensor& valid) const {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (T > config_.max_seq_len)
    throw UserError("sequence of " + std::to_string(T) + " tokens exceeds model.max_seq_len (" +
                    std::to_string(config_.max_seq_len) + ")");
  const auto opts = torch::TensorOptions().dtype(torch::kBool);
  const torch::Tensor causal = torch::ones({T, T}, opts).tril();  // (T, T)
  if (!valid.defined()) {
    const torch::Tensor positions = torch::arange(T, torch::kLong).unsqueeze(0).expand({B, T});
    return run(tokens, positions, causal.view({1, 1, T, T}), nullptr);
  }
  // Padded keys are hidden; every query may still see itself so no softmax row is empty.
  const torch::Tensor eye = torch::eye(T, opts);
  const torch::Tensor mask = (causal.unsqueeze(0) & valid.unsqueeze(1)) | eye.unsqueeze(0);  // (B, T, T)
  return run(tokens, positions_from_valid(valid, {}), mask.unsqueeze(1), nullptr);
}

KVCache LlamaModel::new_cache(int64_t batch, int64_t capacity) const {
  if (capacity > config_.max_seq_len)
    throw UserError("KV cache of " + std::to_string(capacity) + " tokens exceeds model.max_seq_len (" +
                    std::to_string(config_.max_seq_len) + ")");
  KVCache cache;
  const auto opts = flat_.options();
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    cache.k.push_back(torch::zeros({batch, config_.n_kv_heads, capacity, config_.head_dim()}, opts));
    cache.v.push_back(torch::zeros({batch, config_.n_kv_heads, capacity, config_.head_dim()}, opts));
  }
  cache.key_valid = torch::zeros({batch, capacity}, torch::kBool);
  cache.key_position = torch::zeros({batch, capacity}, torch::kLong);
  cache.next_position = torch::zeros({batch}, torch::kLong);
  cache.capacity = capacity;
  return cache;
}

torch::Tensor LlamaModel::forward_cached(const torch::Tensor& tokens, KVCache& cache,
                                         const torch::Tensor& valid_in) const {
  const int64_t B = tokens.size(0), S = tokens.size(1);
  if (cache.length + S > cache.capacity)
    throw UserError("KV cache full: " + std::to_string(cache.length) + " + " + std::to_string(S) +
                    " tokens exceed its capacity of " + std::to_string(cache.capacity));
  const torch::Tensor valid = valid_in.defined() ? valid_in : torch::ones({B, S}, torch::kBool);
  const torch::Tensor positions = positions_from_valid(valid, cache.next_position);  // (B, S)
  cache.key_valid.narrow(1, cache.length, S).copy_(valid);
  cache.key_position.narrow(1, cache.length, S).copy_(positions);
  const int64_t Tk = cache.length + S;
  // Query j (slot length + j) sees real keys in slots <= length + j, and always itself.
  const auto opts = torch::TensorOptions().dtype(torch::kBool);
  const torch::Tensor causal = torch::ones({S, Tk}, opts).tril(cache.length);  // (S, Tk)
  const torch::Tensor self = torch::zeros({S, Tk}, opts);
  self.narrow(1, cache.length, S).copy_(torch::eye(S, opts));
  const torch::Tensor keys = cache.key_valid.narrow(1, 0, Tk).unsqueeze(1);  // (B, 1, Tk)
  const torch::Tensor mask = ((causal.unsqueeze(0) & keys) | self.unsqueeze(0)).unsqueeze(1);
  torch::Tensor logits = run(tokens, positions, mask, &cache);
  cache.next_position = cache.next_position + valid.to(torch::kLong).sum(1);
  cache.length += S;
  return logits;
}

void init_llama_weights(const ParamLayout& layout, const ModelConfig& config, torch::Tensor flat,
                        uint64_t seed) {
  if (flat.scalar_type() != torch::kFloat32 || flat.numel() != layout.total)
    throw UserError("init: expected an FP32 flat buffer of " + std::to_string(layout.total) + " elements");
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  flat.zero_();
  for (const ParamEntry& e : layout.entries) {
    torch::Tensor t = flat.narrow(0, e.offset, e.numel);
    const bool bias = e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
    if (bias)
      t.zero_();
    else if (e.shape.size() == 1)
      t.fill_(1.0);
    else
      t.normal_(0.0, config.init_std, gen);
  }
}

}  // namespace unstuck::model
