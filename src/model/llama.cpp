// Llama forward passes (full and KV-cached) on parameters that view one flat buffer. Shapes use
// B batch, T new tokens, Tk attended keys, H query heads, G kv heads, hd head size, D model width.
#include "unstuck/model/llama.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "unstuck/common/error.h"

namespace unstuck::model {
namespace {

// Indices of each layer's tensors inside the layout (see llama_layout's order).
constexpr std::size_t kPerLayer = 9;
enum LayerParam { kLn1 = 0, kWq, kWk, kWv, kWo, kLn2, kWgate, kWup, kWdown };

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

}  // namespace

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
  const int64_t hd = config_.head_dim();
  inv_freq_ = 1.0 / torch::pow(config_.rope_theta,
                               torch::arange(0, hd, 2, torch::kFloat64) / double(hd));
  inv_freq_ = inv_freq_.to(torch::kFloat32);
}

void LlamaModel::set_requires_grad(bool requires_grad) {
  for (torch::Tensor& p : params_) p.set_requires_grad(requires_grad);
}

torch::Tensor LlamaModel::run(const torch::Tensor& tokens, const torch::Tensor& positions,
                              const torch::Tensor& mask, KVCache* cache) const {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t H = config_.n_heads, G = config_.n_kv_heads, hd = config_.head_dim();
  const auto dtype = flat_.scalar_type();
  torch::Tensor x = at::embedding(param(0), tokens);  // (B, T, D)

  // Rotary tables as Hugging Face builds them: FP32 angles, cast to the compute dtype.
  const torch::Tensor freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq_;  // (B, T, hd/2)
  const torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);                // (B, 1, T, hd)
  const torch::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);

  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const std::size_t p = 1 + std::size_t(layer) * kPerLayer;
    const torch::Tensor h = rms_norm(x, param(p + kLn1), config_.norm_eps);
    torch::Tensor q = at::linear(h, param(p + kWq)).view({B, T, H, hd}).transpose(1, 2);  // (B, H, T, hd)
    torch::Tensor k = at::linear(h, param(p + kWk)).view({B, T, G, hd}).transpose(1, 2);  // (B, G, T, hd)
    torch::Tensor v = at::linear(h, param(p + kWv)).view({B, T, G, hd}).transpose(1, 2);
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
    const torch::Tensor attn = at::scaled_dot_product_attention(q, k, v, mask);  // (B, H, T, hd)
    x = x + at::linear(attn.transpose(1, 2).reshape({B, T, H * hd}), param(p + kWo));
    const torch::Tensor h2 = rms_norm(x, param(p + kLn2), config_.norm_eps);
    x = x + at::linear(torch::silu(at::linear(h2, param(p + kWgate))) * at::linear(h2, param(p + kWup)),
                       param(p + kWdown));
  }
  const std::size_t final_norm = 1 + std::size_t(config_.n_layers) * kPerLayer;
  x = rms_norm(x, param(final_norm), config_.norm_eps);
  const torch::Tensor& head = config_.tie_embeddings ? param(0) : param(final_norm + 1);
  return at::linear(x, head).to(torch::kFloat32);  // (B, T, V)
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
    if (e.shape.size() == 1)
      t.fill_(1.0);
    else
      t.normal_(0.0, config.init_std, gen);
  }
}

}  // namespace unstuck::model
