// Llama-family forward passes (full and KV-cached) on named parameters that view one flat buffer,
// helper tensors on the weights' device, optional activation checkpointing per block. Shapes use
// B batch, T new tokens, Tk attended keys, H query heads, G kv heads, hd head size, D model width,
// F MLP width. The KV cache's row operations are in kv_cache.cpp, the autograd functions (checkpointed
// blocks, lora.dropout's product, gradients into sinks) in llama_autograd.cpp.
#include "unstuck/model/llama.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#if defined(UNSTUCK_HAVE_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "unstuck/common/error.h"
#include "model/cpu_kernels.h"
#include "model/lora_dropout.h"
#include "model/llama_autograd.h"

namespace unstuck::model {
namespace {

// Whether an FP32 CPU tensor op can run as one of our kernels (cpu_kernels.h): no gradient is taken
// through these tensors, and they are contiguous FP32 buffers on the CPU.
bool fp32_cpu_kernel(std::initializer_list<const torch::Tensor*> ts) {
  for (const torch::Tensor* t : ts)
    if (t->scalar_type() != torch::kFloat32 || !t->device().is_cpu() || !t->is_contiguous() ||
        (torch::GradMode::is_enabled() && t->requires_grad()))
      return false;
  return true;
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (fp32_cpu_kernel({&x, &weight})) {
    const int64_t D = x.size(-1), rows = x.numel() / D;
    torch::Tensor out = torch::empty_like(x);
    const float *xp = x.data_ptr<float>(), *wp = weight.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / D),
                     [&](int64_t first, int64_t last) { rms_norm_f32(xp, wp, op, D, float(eps), first, last); });
    return out;
  }
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
    case RopeType::none:
      break;
    case RopeType::linear:
      inv = inv / r.factor;
      break;
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
    throw UserError("model weights: expected a flat buffer of " + std::to_string(layout_.total) + " elements, got " +
                    std::to_string(flat_.numel()));
  if (!flat_.is_contiguous()) throw UserError("model weights: the flat buffer must be contiguous");
  const auto elem = flat_.element_size();
  char* base = static_cast<char*>(flat_.data_ptr());
  for (const ParamEntry& e : layout_.entries)
    params_.push_back(torch::from_blob(base + e.offset * elem, e.shape, flat_.options()));
  std::tie(inv_freq_, rope_attention_) = rope_inv_freq(config_);
  inv_freq_ = inv_freq_.to(flat_.device());
  // Name every tensor once; a family's optional parts stay undefined when its layout lacks them.
  embed_ = param("model.embed_tokens.weight");
  final_norm_ = param("model.norm.weight");
  head_ = config_.tie_embeddings ? embed_ : param("lm_head.weight");
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const auto opt = [&](const char* suffix) { return layout_.find(p + suffix) ? param(p + suffix) : torch::Tensor(); };
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
    w.wqkv = adjacent({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
    if (w.bq.defined()) {
      w.bqkv = adjacent({p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"});
      if (!w.bqkv.defined()) w.wqkv = torch::Tensor();
    }
    w.w_gate_up = adjacent({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
    layers_.push_back(std::move(w));
  }
}

torch::Tensor LlamaModel::adjacent(const std::vector<std::string>& names) const { return adjacent_view(flat_, names); }

torch::Tensor LlamaModel::adjacent_view(const torch::Tensor& buffer, const std::vector<std::string>& names) const {
  std::vector<const ParamEntry*> parts;
  for (const std::string& n : names) parts.push_back(layout_.find(n));
  int64_t rows = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0 && parts[i]->offset != parts[i - 1]->offset + parts[i - 1]->numel) return {};
    rows += parts[i]->shape[0];
  }
  std::vector<int64_t> shape = parts[0]->shape;
  shape[0] = rows;
  return torch::from_blob(static_cast<char*>(buffer.data_ptr()) + parts[0]->offset * buffer.element_size(), shape,
                          buffer.options());
}

void LlamaModel::set_gradient_buffer(const torch::Tensor& grad) {
  if (grad.scalar_type() != torch::kFloat32 || grad.dim() != 1 || grad.numel() != layout_.total ||
      grad.device() != flat_.device() || !grad.is_contiguous())
    throw std::invalid_argument(
        "set_gradient_buffer: expected a contiguous FP32 buffer of the layout's size on the "
        "weights' device");
  grad_ = grad;
  const auto view = [&](const std::string& name) {
    const ParamEntry* e = layout_.find(name);
    return e ? grad_.narrow(0, e->offset, e->numel).view(e->shape) : torch::Tensor();
  };
  embed_sink_ = view("model.embed_tokens.weight");
  head_sink_ = config_.tie_embeddings ? embed_sink_ : view("lm_head.weight");
  layer_sinks_.clear();
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const LayerWeights& w = layers_[std::size_t(i)];
    LayerWeights s;
    s.wq = view(p + "self_attn.q_proj.weight");
    s.wk = view(p + "self_attn.k_proj.weight");
    s.wv = view(p + "self_attn.v_proj.weight");
    s.wo = view(p + "self_attn.o_proj.weight");
    s.bq = view(p + "self_attn.q_proj.bias");
    s.bk = view(p + "self_attn.k_proj.bias");
    s.bv = view(p + "self_attn.v_proj.bias");
    s.bo = view(p + "self_attn.o_proj.bias");
    s.w_gate = view(p + "mlp.gate_proj.weight");
    s.w_up = view(p + "mlp.up_proj.weight");
    s.w_down = view(p + "mlp.down_proj.weight");
    // Where the weights are one matrix, so are their gradients (the same offsets).
    if (w.wqkv.defined())
      s.wqkv = adjacent_view(
          grad_, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
    if (w.bqkv.defined())
      s.bqkv =
          adjacent_view(grad_, {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"});
    if (w.w_gate_up.defined())
      s.w_gate_up = adjacent_view(grad_, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
    layer_sinks_.push_back(std::move(s));
  }
}

void LlamaModel::set_requires_grad(bool requires_grad) {
  for (torch::Tensor& p : params_) p.set_requires_grad(requires_grad);
}

void LlamaModel::set_adapters(const LoraSpec& spec, torch::Tensor flat) {
  const ParamLayout layout = lora_layout(config_, spec);
  if (flat.dim() != 1 || flat.numel() != layout.total || flat.scalar_type() != flat_.scalar_type() ||
      flat.device() != flat_.device() || !flat.is_contiguous())
    throw std::invalid_argument(
        "set_adapters: expected a contiguous 1-D buffer of lora_layout().total elements "
        "in the weights' dtype and device");
  adapter_flat_ = std::move(flat);
  lora_scaling_ = spec.scaling();
  if (!(spec.dropout >= 0 && spec.dropout < 1)) throw std::invalid_argument("set_adapters: dropout must be in [0, 1)");
  lora_dropout_ = spec.dropout;
  adapters_.assign(std::size_t(config_.n_layers), {});
  adapter_params_.clear();
  char* base = static_cast<char*>(adapter_flat_.data_ptr());
  const auto elem = adapter_flat_.element_size();
  std::size_t k = 0;
  for (int64_t i = 0; i < config_.n_layers; ++i)
    for (int m = 0; m < kLoraModules; ++m) {
      if (!spec.targets_module(LoraModule(m))) continue;
      const ParamEntry &a = layout.entries[k], &b = layout.entries[k + 1];
      k += 2;
      adapters_[std::size_t(i)][std::size_t(m)] = {
          torch::from_blob(base + a.offset * elem, a.shape, adapter_flat_.options()),
          torch::from_blob(base + b.offset * elem, b.shape, adapter_flat_.options())};
      adapter_params_.push_back(adapters_[std::size_t(i)][std::size_t(m)].first);
      adapter_params_.push_back(adapters_[std::size_t(i)][std::size_t(m)].second);
    }
}

namespace {

// Whether each row of `valid` (B, T) is padding, one run of real tokens, padding; and gather indices
// that rotate every row so its run starts at 0, and back. One host read for the three checks.
struct RowRotation {
  bool one_run = false;    // every row is padding, one run of real tokens, padding
  bool no_lead = false;    // no row starts with padding: nothing to rotate
  bool all_real = false;   // no padding at all
  torch::Tensor to_front;  // (B, T) int64: rotated[b][i] = x[b][to_front[b][i]]
  torch::Tensor to_back;   // (B, T) int64: x[b][i] = rotated[b][to_back[b][i]]
};

RowRotation row_rotation(const torch::Tensor& valid) {
  const int64_t T = valid.size(1);
  const torch::Tensor idx = torch::arange(T, valid.options().dtype(torch::kLong));  // (T)
  const torch::Tensor count = valid.sum(1, false, torch::kLong).unsqueeze(1);       // (B, 1)
  const torch::Tensor first = valid.to(torch::kLong).argmax(1).unsqueeze(1);        // (B, 1): first real
  const torch::Tensor run = (idx >= first) & (idx < first + count);                 // (B, T)
  const torch::Tensor facts = torch::stack({run.eq(valid).all(), first.max().eq(0), valid.all()}).cpu();
  const bool* f = facts.data_ptr<bool>();
  RowRotation r{f[0], f[1], f[2], {}, {}};
  if (r.one_run && !r.no_lead) {
    r.to_front = (idx + first) % T;
    r.to_back = (idx - first + T) % T;
  }
  return r;
}

// x (B, T, ...) gathered along dim 1 by index (B, T').
torch::Tensor gather_rows(const torch::Tensor& x, const torch::Tensor& index) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[1] = index.size(1);
  torch::Tensor ix = index;
  for (int64_t d = 2; d < x.dim(); ++d) ix = ix.unsqueeze(-1);
  return x.gather(1, ix.expand(shape));
}

// Mistral's window over index positions 0..T-1: query i sees keys j with i - W < j <= i.
torch::Tensor window_mask(int64_t T, int64_t W, const torch::TensorOptions& long_opts) {
  const torch::Tensor i = torch::arange(T, long_opts).unsqueeze(1), j = i.view({1, T});
  return ((i >= j) & (i - j < W)).view({1, 1, T, T});
}

// Whether a step of T tokens on this cache takes the CPU decoding path of decode_attention().
bool decodes_over_capacity(const KVCache& cache, int64_t T) {
  return T == 1 && cache.length > 0 && !cache.key_valid.is_cuda();
}

// One query per row on the CPU: q (B, H, 1, hd) against the first `filled` slots of the cache k, v
// (B, G, A, hd), slots masked by `bias` (B, 1, 1, A: 0 for a key, -inf for an unfilled or hidden
// slot, built once per step for every layer). FP32 and BF16 run our fused kernel (cpu_kernels.h): the
// step is bound by reading the cache, and the kernel reads each filled key and value once, with no
// score tensors in between. Other dtypes (FP16) run two batched matrix products over the whole
// contiguous buffer with the H / G query heads of a group stacked as rows (GQA without copying keys):
// libtorch's CPU flash kernel runs a single query as one matrix-vector product per (row, head), and
// batched products on a slice of the cache copy it; scores are formed in the compute dtype and
// normalized in FP32 (as transformers' eager attention does), which the kernel's BF16 form follows.
torch::Tensor decode_attention(const torch::Tensor& q_in, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& bias, int64_t filled) {
  const int64_t B = q_in.size(0), H = q_in.size(1), hd = q_in.size(3), G = k.size(1), A = k.size(2);
  const double scale = 1.0 / std::sqrt(double(hd));
  const auto dtype = q_in.scalar_type();
  if ((dtype == torch::kFloat32 || dtype == torch::kBFloat16) && k.is_contiguous() && v.is_contiguous() &&
      bias.is_contiguous() && bias.scalar_type() == dtype) {
    const torch::Tensor q = q_in.stride(1) == hd && q_in.stride(3) == 1 ? q_in : q_in.contiguous();
    torch::Tensor out = torch::empty({B, H, 1, hd}, q.options());
    const DecodeAttentionShape shape{H, G, hd, A, filled, q.stride(0)};
    at::parallel_for(0, B * G, 16, [&](int64_t first, int64_t last) {
      if (dtype == torch::kFloat32)
        decode_attention_f32(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), bias.data_ptr<float>(),
                             out.data_ptr<float>(), shape, float(scale), first, last);
      else
        decode_attention_bf16(reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>()),
                              reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>()),
                              reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>()),
                              reinterpret_cast<const uint16_t*>(bias.data_ptr<at::BFloat16>()),
                              reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()), shape, float(scale), first,
                              last);
    });
    return out;
  }
  const torch::Tensor qg = q_in.reshape({B, G, H / G, hd}) * scale;  // (B, G, H/G, hd)
  const torch::Tensor scores = at::matmul(qg, k.transpose(2, 3)).add_(bias);
  const torch::Tensor probs = at::softmax(scores, -1, torch::kFloat32).to(q_in.scalar_type());  // (B, G, H/G, A)
  return at::matmul(probs, v).view({B, H, 1, hd});                                              // (B, H, 1, hd)
}

using LayerAdapters = std::array<std::pair<torch::Tensor, torch::Tensor>, kLoraModules>;
using Field = torch::Tensor LayerWeights::*;

// One layer's projections in one pass, chosen once per layer: the base product (through
// LinearIntoSink when training into the flat gradient: its gradients go to the layer's sinks), plus
// the LoRA adapter's where the module has one (PEFT's order: out + s (in A^T) B^T; with lora.dropout
// in this pass, `in` dropped out first).
struct Projections {
  const LayerWeights& w;
  const LayerWeights* sink;       // training into the flat gradient: the layer's gradient ranges
  const LayerAdapters* adapters;  // LoRA
  const DropoutPass* dropout;     // lora.dropout in this pass
  int64_t layer;
  double dropout_p, scaling;
  // Inference, or training into the flat gradient, without adapters: the fused q/k/v and gate/up
  // matrices (their gradients are as adjacent as they are).
  bool fused;

  torch::Tensor base(const torch::Tensor& in, Field weight, Field bias) const {
    const torch::Tensor& b = bias ? w.*bias : undefined();
    if (!sink) return linear(in, w.*weight, b);
    const auto opt = [](const torch::Tensor& t) {
      return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
    };
    return linear_into_sink(in, w.*weight, opt(b), sink->*weight, opt(bias ? sink->*bias : undefined()));
  }
  torch::Tensor operator()(LoraModule m, const torch::Tensor& in, Field weight, Field bias = nullptr) const {
    const torch::Tensor out = base(in, weight, bias);
    if (!adapters) return out;
    const auto& [a, b] = (*adapters)[std::size_t(m)];
    if (!a.defined()) return out;
    const torch::Tensor xa = dropout ? lora_dropout_linear(in, a, *dropout, layer, m, dropout_p) : at::linear(in, a);
    return out + at::linear(xa, b) * scaling;
  }
  static const torch::Tensor& undefined() {
    static const torch::Tensor none;
    return none;
  }
};

// q (B, T, H, hd), k and v (B, T, G, hd) of the normed input h; `rotated`: RoPE is applied already.
struct Qkv {
  torch::Tensor q, k, v;
  bool rotated = false;
};

Qkv project_qkv(const Projections& p, const torch::Tensor& h, const torch::Tensor& cos, const torch::Tensor& sin,
                const ModelConfig& c) {
  const int64_t B = h.size(0), T = h.size(1), H = c.n_heads, G = c.n_kv_heads, hd = c.head_dim();
  if (!p.fused || !p.w.wqkv.defined())
    return {p(LoraModule::q_proj, h, &LayerWeights::wq, &LayerWeights::bq).view({B, T, H, hd}),
            p(LoraModule::k_proj, h, &LayerWeights::wk, &LayerWeights::bk).view({B, T, G, hd}),
            p(LoraModule::v_proj, h, &LayerWeights::wv, &LayerWeights::bv).view({B, T, G, hd})};
  const torch::Tensor qkv = p.base(h, &LayerWeights::wqkv, &LayerWeights::bqkv);  // (B, T, (H+2G)*hd)
  Qkv out;
  out.v = qkv.narrow(-1, (H + G) * hd, G * hd).view({B, T, G, hd});
  if (p.w.q_norm.defined()) {  // Qwen3 normalizes each head before RoPE
    out.q = qkv.narrow(-1, 0, H * hd).view({B, T, H, hd});
    out.k = qkv.narrow(-1, H * hd, G * hd).view({B, T, G, hd});
    return out;
  }
  // q and k rotated together: half the elementwise ops, the same values.
  torch::Tensor qk = qkv.narrow(-1, 0, (H + G) * hd).view({B, T, H + G, hd});
  if (fp32_cpu_kernel({&qkv, &cos, &sin})) {  // in place in qkv, the same bits as the ops below
    float* xp = qkv.data_ptr<float>();
    const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
    at::parallel_for(0, B * T, std::max<int64_t>(1, 4096 / ((H + G) * hd)), [&](int64_t first, int64_t last) {
      rope_f32(xp, cp, sp, H + G, hd, (H + 2 * G) * hd, first, last);
    });
  } else {
    const torch::Tensor cs = cos.transpose(1, 2), sn = sin.transpose(1, 2);  // (B, T, 1, hd)
    qk = qk * cs + rotate_half(qk) * sn;
  }
  out.q = qk.narrow(2, 0, H);
  out.k = qk.narrow(2, H, G);
  out.rotated = true;
  return out;
}

// The keys and values a layer attends over (B, G, Tk, hd): a shared prompt's captured, or each
// row's prompt keys put first; or the cache's, after this step's are written into it.
void attach_keys(int64_t layer, torch::Tensor& k, torch::Tensor& v, KVCache* cache, PromptKV* prompt_kv, int64_t T) {
  if (prompt_kv && prompt_kv->capture) {
    prompt_kv->k.push_back(k);
    prompt_kv->v.push_back(v);
  } else if (prompt_kv) {  // each row's prompt keys first, then its own (B, G, P + T, hd)
    k = torch::cat({prompt_kv->k[std::size_t(layer)].index_select(0, prompt_kv->of_row), k}, 2);
    v = torch::cat({prompt_kv->v[std::size_t(layer)].index_select(0, prompt_kv->of_row), v}, 2);
  }
  if (cache && cache->slot.defined()) {  // a fixed-shape step: the slot is a device index
    cache->k[layer].index_copy_(2, cache->slot, k);
    cache->v[layer].index_copy_(2, cache->slot, v);
    k = cache->k[layer].narrow(2, 0, cache->attend_slots);  // (B, G, attend_slots, hd)
    v = cache->v[layer].narrow(2, 0, cache->attend_slots);
  } else if (cache) {
    cache->k[layer].narrow(2, cache->length, T).copy_(k);
    cache->v[layer].narrow(2, cache->length, T).copy_(v);
    k = cache->k[layer].narrow(2, 0, cache->length + T);  // (B, G, Tk, hd)
    v = cache->v[layer].narrow(2, 0, cache->length + T);
  }
}

// Attention of q (B, H, T, hd) over k, v (B, G, Tk, hd), the kernel chosen by where it runs: (B, H, T, hd).
torch::Tensor attend(int64_t layer, const torch::Tensor& q, torch::Tensor k, torch::Tensor v, const torch::Tensor& mask,
                     bool causal, const KVCache* cache) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3), G = k.size(1);
  if (cache && !cache->slot.defined() && decodes_over_capacity(*cache, T))
    // CPU decoding attends over the whole (contiguous) cache; `mask` hides unfilled slots.
    return decode_attention(q, cache->k[layer], cache->v[layer], mask, cache->length + T);
  if (T == 1 && mask.defined() && q.is_cuda() && G != H)
    // One query per row with a key mask on CUDA (padded prompts, a sliding window): the
    // memory-efficient kernel takes masks but not GQA, so the H/G query heads of each KV group are
    // stacked as H/G query rows of that group, (B, G, H/G, hd) against its (B, G, Tk, hd) keys: the
    // scores of grouped-query attention (head h reads group h / (H/G)) without copying the keys.
    return at::scaled_dot_product_attention(q.reshape({B, G, H / G, hd}), k, v, mask, 0.0, false)
        .reshape({B, H, 1, hd});  // (B, H, 1, hd); the kernel's output is laid out (B, H/G, G, hd)
  // Grouped-query attention without copying keys/values, except where a mask is needed on CUDA:
  // there the memory-efficient kernel takes masks but not enable_gqa (flash takes GQA, not masks).
  const bool native_gqa = !(mask.defined() && q.is_cuda());
  if (G != H && !native_gqa) {
    k = k.repeat_interleave(H / G, 1);
    v = v.repeat_interleave(H / G, 1);
  }
  return at::scaled_dot_product_attention(q, k, v, mask.defined() ? std::optional<torch::Tensor>(mask) : std::nullopt,
                                          0.0, causal, std::nullopt, /*enable_gqa=*/G != H && native_gqa);
}

// The MLP of the normed input h: down(silu(gate(h)) * up(h)).
torch::Tensor mlp(const Projections& p, const torch::Tensor& h, int64_t F) {
  if (p.fused && p.w.w_gate_up.defined()) {
    const torch::Tensor gate_up = p.base(h, &LayerWeights::w_gate_up, nullptr);  // (B, T, 2F)
    const torch::Tensor act = torch::silu(gate_up.narrow(-1, 0, F)) * gate_up.narrow(-1, F, F);
    return p.base(act, &LayerWeights::w_down, nullptr);
  }
  const torch::Tensor act =
      torch::silu(p(LoraModule::gate_proj, h, &LayerWeights::w_gate)) * p(LoraModule::up_proj, h, &LayerWeights::w_up);
  return p(LoraModule::down_proj, act, &LayerWeights::w_down);
}

}  // namespace

torch::Tensor LlamaModel::block(int64_t layer, const torch::Tensor& x_in, const torch::Tensor& cos,
                                const torch::Tensor& sin, const torch::Tensor& mask, bool causal, KVCache* cache,
                                PromptKV* prompt_kv, const DropoutPass* dropout) const {
  const int64_t B = x_in.size(0), T = x_in.size(1), H = config_.n_heads, hd = config_.head_dim();
  const LayerWeights& w = layers_[std::size_t(layer)];
  const bool grad = torch::GradMode::is_enabled() && w.wq.requires_grad();
  const LayerWeights* sink = grad && !layer_sinks_.empty() ? &layer_sinks_[std::size_t(layer)] : nullptr;
  const LayerAdapters* adapters = adapters_.empty() ? nullptr : &adapters_[std::size_t(layer)];
  const DropoutPass* drop = dropout && lora_dropout_ > 0 ? dropout : nullptr;
  const Projections p{w, sink, adapters, drop, layer, lora_dropout_, lora_scaling_, (!grad || sink) && !adapters};
  // norm -> q, k, v -> (Qwen3's q/k norms) -> RoPE -> the keys attended over -> attention -> o -> MLP
  Qkv a = project_qkv(p, rms_norm(x_in, w.attn_norm, config_.norm_eps), cos, sin, config_);
  if (w.q_norm.defined()) {
    a.q = rms_norm(a.q, w.q_norm, config_.norm_eps);
    a.k = rms_norm(a.k, w.k_norm, config_.norm_eps);
  }
  torch::Tensor q = a.q.transpose(1, 2), k = a.k.transpose(1, 2), v = a.v.transpose(1, 2);  // (B, H|G, T, hd)
  if (!a.rotated) {
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
  }
  attach_keys(layer, k, v, cache, prompt_kv, T);
  const torch::Tensor attn = attend(layer, q, k, v, mask, causal, cache).transpose(1, 2).reshape({B, T, H * hd});
  const torch::Tensor x = x_in + p(LoraModule::o_proj, attn, &LayerWeights::wo, &LayerWeights::bo);
  return x + mlp(p, rms_norm(x, w.mlp_norm, config_.norm_eps), config_.ffn_dim);  // (B, T, D)
}

torch::Tensor LlamaModel::hidden(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& mask,
                                 bool causal, KVCache* cache, PromptKV* prompt_kv,
                                 const DropoutPass* dropout_rows) const {
  const auto dtype = flat_.scalar_type();
  const bool into_sink = embed_sink_.defined() && torch::GradMode::is_enabled() && embed_.requires_grad();
  torch::Tensor x =
      into_sink ? embedding_into_sink(embed_, tokens, embed_sink_) : at::embedding(embed_, tokens);  // (B, T, D)
  // Rotary tables as Hugging Face builds them: FP32 angles (times yarn's attention factor), cast to
  // the compute dtype.
  const torch::Tensor freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq_;  // (B, T, hd/2)
  const torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);                // (B, 1, T, hd)
  torch::Tensor cos = emb.cos(), sin = emb.sin();
  if (rope_attention_ != 1.0) {
    cos = cos * rope_attention_;
    sin = sin * rope_attention_;
  }
  cos = cos.to(dtype);
  sin = sin.to(dtype);
  const bool checkpoint = config_.activation_checkpointing && !cache && torch::GradMode::is_enabled();
  std::optional<DropoutPass> dropout;
  if (dropout_rows && lora_dropout_ > 0 && !adapters_.empty()) {
    dropout = *dropout_rows;
    dropout->positions = positions;
  }
  const DropoutPass* drop = dropout ? &*dropout : nullptr;
  const auto opt = [](const torch::Tensor& t) { return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt; };
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    if (checkpoint) {
      const std::vector<torch::Tensor> weights = block_trainable(*this, layer);
      const bool capture = prompt_kv && prompt_kv->capture, prepend = prompt_kv && !capture;
      if (!weights.empty() || x.requires_grad() || (prepend && prompt_kv->k[std::size_t(layer)].requires_grad())) {
        const torch::Tensor none;
        const auto outs = checkpointed_block(
            x, cos, sin, opt(mask), opt(prepend ? prompt_kv->k[std::size_t(layer)] : none),
            opt(prepend ? prompt_kv->v[std::size_t(layer)] : none), opt(prepend ? prompt_kv->of_row : none),
            at::TensorList(weights), this, layer, causal, capture, drop);
        x = outs[0];
        if (capture) {
          prompt_kv->k.push_back(outs[1]);
          prompt_kv->v.push_back(outs[2]);
        }
        continue;
      }
    }
    x = block(layer, x, cos, sin, mask, causal, cache, prompt_kv, drop);
  }
  return x;
}

torch::Tensor LlamaModel::head(const torch::Tensor& x) const { return logits_of(final_norm(x)); }

torch::Tensor LlamaModel::final_norm(const torch::Tensor& x) const {
  return rms_norm(x, final_norm_, config_.norm_eps);
}

torch::Tensor LlamaModel::logits_of(const torch::Tensor& normed) const {
  return at::linear(normed, head_).to(torch::kFloat32);  // (B, T, V)
}

torch::Tensor LlamaModel::forward(const torch::Tensor& tokens, const torch::Tensor& valid, int64_t logits_from) const {
  return logits_of(forward_hidden(tokens, valid, logits_from));
}

torch::Tensor LlamaModel::forward_hidden(const torch::Tensor& tokens, const torch::Tensor& valid, int64_t logits_from,
                                         const DropoutRows* dropout) const {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (T > config_.max_seq_len)
    throw UserError("sequence of " + std::to_string(T) + " tokens exceeds model.max_seq_len (" +
                    std::to_string(config_.max_seq_len) + ")");
  if (logits_from < 0 || logits_from >= T)
    throw std::invalid_argument("forward: logits_from " + std::to_string(logits_from) + " outside [0, " +
                                std::to_string(T) + ")");
  const auto tail = [&](const torch::Tensor& x) {
    return logits_from == 0 ? x : x.narrow(1, logits_from, T - logits_from);
  };
  const int64_t W = config_.sliding_window;
  const RowRotation rot = valid.defined() ? row_rotation(valid) : RowRotation{true, true, true, {}, {}};
  std::optional<DropoutPass> drop;
  if (dropout) drop = DropoutPass{dropout->key, false, dropout->rows, {}};
  const DropoutPass* d = drop ? &*drop : nullptr;
  if (rot.one_run) {
    // Real tokens at 0..n-1 of each (rotated) row, padding after: plain causal attention, rotary
    // position = index. Mistral's window needs a mask only when the sequence is longer than it.
    const torch::Tensor positions = torch::arange(T, tokens.options()).unsqueeze(0).expand({B, T});
    const torch::Tensor window = W > 0 && T > W ? window_mask(T, W, tokens.options()) : torch::Tensor();
    const bool rotate = !rot.no_lead;
    const torch::Tensor x = hidden(rotate ? tokens.gather(1, rot.to_front) : tokens, positions, window,
                                   !window.defined(), nullptr, nullptr, d);  // (B, T, D)
    return final_norm(tail(rotate ? gather_rows(x, rot.to_back) : x));
  }
  // Padding inside rows: a dense mask. Padded keys are hidden; every query may still see itself so
  // no softmax row is empty.
  const auto bool_opts = tokens.options().dtype(torch::kBool);
  const torch::Tensor positions = positions_from_valid(valid, {});
  const torch::Tensor causal = torch::ones({T, T}, bool_opts).tril();                                       // (T, T)
  torch::Tensor mask = (causal.unsqueeze(0) & valid.unsqueeze(1)) | torch::eye(T, bool_opts).unsqueeze(0);  // (B, T, T)
  if (W > 0) mask = mask & ((positions.unsqueeze(2) - positions.unsqueeze(1)) < W);
  return final_norm(tail(hidden(tokens, positions, mask.unsqueeze(1), false, nullptr, nullptr, d)));
}

torch::Tensor LlamaModel::forward_completions(const SharedPrompts& sp, const torch::Tensor& completions) const {
  return logits_of(forward_completions_hidden(sp, completions));
}

torch::Tensor LlamaModel::forward_completions_hidden(const SharedPrompts& sp, const torch::Tensor& completions,
                                                     const DropoutRows* dropout) const {
  const int64_t U = sp.tokens.size(0), P = sp.tokens.size(1), n = completions.size(0), T = completions.size(1);
  if (sp.of_row.dim() != 1 || sp.of_row.size(0) != n || T < 1 || P < 1 ||
      (sp.valid.defined() && sp.valid.sizes() != sp.tokens.sizes()))
    throw std::invalid_argument(
        "forward_completions: expected prompts (U, P) with valid (U, P), of_row (n), "
        "completions (n, T >= 1)");
  if (P + T - 1 > config_.max_seq_len)
    throw UserError("sequence of " + std::to_string(P + T - 1) + " tokens exceeds model.max_seq_len (" +
                    std::to_string(config_.max_seq_len) + ")");
  const RowRotation rot = sp.valid.defined() ? row_rotation(sp.valid) : RowRotation{true, true, true, {}, {}};
  const int64_t W = config_.sliding_window;
  if ((W > 0 && P + T - 1 > W) || !rot.one_run) {
    // The rows written out in full: prompt, then the completion but its last token.
    const torch::Tensor rest = completions.narrow(1, 0, T - 1);
    const torch::Tensor tokens = torch::cat({sp.tokens.index_select(0, sp.of_row), rest}, 1);
    const torch::Tensor valid =
        sp.valid.defined() ? torch::cat({sp.valid.index_select(0, sp.of_row), torch::ones_like(rest, torch::kBool)}, 1)
                           : torch::Tensor();
    return forward_hidden(tokens, valid, P - 1, dropout);
  }
  // Prompt pass: each distinct prompt once, real tokens rotated to the front, plain causal
  // attention; every layer's keys and values are kept (with their autograd history).
  const auto long_opts = sp.tokens.options();
  const bool rotate = !rot.no_lead;
  PromptKV kv;
  kv.capture = true;
  std::optional<DropoutPass> drop_prompts, drop_rows;
  if (dropout) {
    drop_prompts = DropoutPass{dropout->key, true, dropout->prompts, {}};
    drop_rows = DropoutPass{dropout->key, false, dropout->rows, {}};
  }
  const torch::Tensor x_prompt = hidden(rotate ? sp.tokens.gather(1, rot.to_front) : sp.tokens,
                                        torch::arange(P, long_opts).unsqueeze(0).expand({U, P}), {}, true, nullptr, &kv,
                                        drop_prompts ? &*drop_prompts : nullptr);  // (U, P, D)
  const torch::Tensor length =
      sp.valid.defined() ? sp.valid.sum(1, false, torch::kLong) : torch::full({U}, P, long_opts);
  const torch::Tensor last = gather_rows(x_prompt, (length - 1).unsqueeze(1)).index_select(0, sp.of_row);  // (n, 1, D)
  if (T == 1) return final_norm(last);
  // Completion pass: the rows' tokens but the last, at positions after their prompts; queries see
  // the real slots of their prompt and the completion causally.
  const int64_t S = T - 1;
  const torch::Tensor row_length = length.index_select(0, sp.of_row).unsqueeze(1);        // (n, 1)
  const torch::Tensor positions = row_length + torch::arange(S, long_opts).unsqueeze(0);  // (n, S)
  const auto bool_opts = long_opts.dtype(torch::kBool);
  const torch::Tensor prompt_keys =
      (torch::arange(P, long_opts).unsqueeze(0) < row_length).unsqueeze(1).expand({n, S, P});
  const torch::Tensor own_keys = torch::ones({S, S}, bool_opts).tril().unsqueeze(0).expand({n, S, S});
  const torch::Tensor mask = torch::cat({prompt_keys, own_keys}, 2).unsqueeze(1);  // (n, 1, S, P + S)
  kv.capture = false;
  kv.of_row = sp.of_row;
  const torch::Tensor x = hidden(completions.narrow(1, 0, S), positions, mask, false, nullptr, &kv,
                                 drop_rows ? &*drop_rows : nullptr);  // (n, S, D)
  return final_norm(torch::cat({last, x}, 1));
}

KVCache LlamaModel::new_cache(int64_t batch, int64_t capacity) const {
  if (capacity > config_.max_seq_len)
    throw UserError("KV cache of " + std::to_string(capacity) + " tokens exceeds model.max_seq_len (" +
                    std::to_string(config_.max_seq_len) + ")");
  return new_slots_cache(batch, capacity);
}

KVCache LlamaModel::new_slots_cache(int64_t batch, int64_t capacity) const {
  KVCache cache;  // no slots yet: the first forward_cached() reserves what it fills
  const auto opts = flat_.options();
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    cache.k.push_back(torch::zeros({batch, config_.n_kv_heads, 0, config_.head_dim()}, opts));
    cache.v.push_back(torch::zeros({batch, config_.n_kv_heads, 0, config_.head_dim()}, opts));
  }
  cache.key_valid = torch::zeros({batch, 0}, opts.dtype(torch::kBool));
  cache.key_position = torch::zeros({batch, 0}, opts.dtype(torch::kLong));
  cache.next_position = torch::zeros({batch}, opts.dtype(torch::kLong));
  cache.capacity = capacity;
  const auto dtype = flat_.scalar_type();
  const bool kernel_decodes = flat_.device().is_cpu() && (dtype == torch::kFloat32 || dtype == torch::kBFloat16);
  // On a GPU the cache is allocated at capacity at once (the memory plan counts it so): growing it
  // would copy every filled slot of every layer each kGrowSlots tokens.
  cache.grow_slots = kernel_decodes || flat_.is_cuda() ? std::max<int64_t>(capacity, 1) : KVCache::kGrowSlots;
  return cache;
}

torch::Tensor LlamaModel::decode_step(const torch::Tensor& tokens, KVCache& cache) const {
  const int64_t A = tokens.size(0), S = cache.attend_slots, W = config_.sliding_window;
  if (!cache.slot.defined() || tokens.size(1) != 1 || A != cache.batch() || S > cache.allocated() ||
      cache.allocated() != cache.capacity || cache.length < 1 || cache.length >= S)
    throw std::invalid_argument(
        "decode_step: needs a cache with a slot tensor, all of its capacity allocated, "
        "one token per row and attend_slots in (length, capacity]");
  const torch::Tensor positions = cache.next_position.unsqueeze(1);  // (A, 1)
  cache.key_valid.index_fill_(1, cache.slot, true);
  cache.key_position.index_copy_(1, cache.slot, positions);
  // Every filled key is at or before the query; unfilled slots (and padding) are masked.
  torch::Tensor mask = cache.key_valid.narrow(1, 0, S).view({A, 1, 1, S});
  if (W > 0) mask = mask & ((positions - cache.key_position.narrow(1, 0, S)) < W).view({A, 1, 1, S});
  const torch::Tensor x = hidden(tokens, positions, mask, /*causal=*/false, &cache);  // (A, 1, D)
  cache.next_position.add_(1);
  cache.slot.add_(1);
  return head(x);
}

torch::Tensor LlamaModel::forward_cached(const torch::Tensor& tokens, KVCache& cache, const torch::Tensor& valid_in,
                                         bool last_only) const {
  const int64_t B = tokens.size(0), S = tokens.size(1);
  if (cache.length + S > cache.capacity)
    throw UserError("KV cache full: " + std::to_string(cache.length) + " + " + std::to_string(S) +
                    " tokens exceed its capacity of " + std::to_string(cache.capacity));
  if (B != cache.batch())
    throw std::invalid_argument("forward_cached: " + std::to_string(B) + " rows for a cache of " +
                                std::to_string(cache.batch()));
  cache.reserve(cache.length + S);
  const int64_t W = config_.sliding_window, L = cache.length, Tk = L + S;
  // A fresh cache whose rows each hold one run of real tokens is filled causally without a mask:
  // rows are rotated so their real tokens come first (later steps attend by key_valid, so the
  // order of the slots does not matter to them).
  RowRotation rot{L == 0 && !valid_in.defined(), true, true, {}, {}};
  if (L == 0 && valid_in.defined()) rot = row_rotation(valid_in);
  const bool rotate = rot.one_run && !rot.no_lead;
  const torch::Tensor toks = rotate ? tokens.gather(1, rot.to_front) : tokens;
  torch::Tensor valid;
  if (valid_in.defined()) {
    valid = rotate ? valid_in.gather(1, rot.to_front) : valid_in;
    if (!(L == 0 ? rot.all_real : valid.all().item<bool>())) cache.has_holes = true;
  }
  const torch::Tensor positions =
      valid.defined() ? positions_from_valid(valid, cache.next_position)
                      : cache.next_position.unsqueeze(1) + torch::arange(S, tokens.options()).unsqueeze(0);  // (B, S)
  if (valid.defined())
    cache.key_valid.narrow(1, L, S).copy_(valid);
  else
    cache.key_valid.narrow(1, L, S).fill_(true);
  cache.key_position.narrow(1, L, S).copy_(positions);

  torch::Tensor mask;
  bool causal = false;
  if (rot.one_run) {  // fresh cache, real tokens first in every row
    if (W > 0 && S > W)
      mask = window_mask(S, W, tokens.options());
    else
      causal = true;
  } else if (decodes_over_capacity(cache, S)) {  // CPU decoding over the whole cache: the filled slots
    torch::Tensor keys = cache.key_valid.view({B, 1, 1, cache.allocated()});
    if (W > 0 && Tk > W) keys = keys & ((positions - cache.key_position) < W).view({B, 1, 1, cache.allocated()});
    // As an additive bias in the compute dtype: one add per layer instead of a negation and a fill.
    mask = torch::zeros(keys.sizes(), flat_.options()).masked_fill_(keys.logical_not(), -INFINITY);
  } else if (S == 1) {  // one decode step: every filled key is at or before the query
    if (cache.has_holes) mask = cache.key_valid.narrow(1, 0, Tk).view({B, 1, 1, Tk});
    if (W > 0 && Tk > W) {
      const torch::Tensor near = ((positions - cache.key_position.narrow(1, 0, Tk)) < W).view({B, 1, 1, Tk});
      mask = mask.defined() ? mask & near : near;
    }
  } else {
    // Query j (slot L + j) sees real keys in slots <= L + j, and always itself.
    const auto bool_opts = tokens.options().dtype(torch::kBool);
    const torch::Tensor causal_mask = torch::ones({S, Tk}, bool_opts).tril(L);  // (S, Tk)
    const torch::Tensor self = torch::zeros({S, Tk}, bool_opts);
    self.narrow(1, L, S).copy_(torch::eye(S, bool_opts));
    const torch::Tensor keys = cache.key_valid.narrow(1, 0, Tk).unsqueeze(1);  // (B, 1, Tk)
    mask = (causal_mask.unsqueeze(0) & keys) | self.unsqueeze(0);              // (B, S, Tk)
    if (W > 0) mask = mask & ((positions.unsqueeze(2) - cache.key_position.narrow(1, 0, Tk).unsqueeze(1)) < W);
    mask = mask.unsqueeze(1);
  }
  torch::Tensor x = hidden(toks, positions, mask, causal, &cache);  // (B, S, D)
  cache.next_position = cache.next_position + (valid.defined() ? valid.sum(1, false, torch::kLong)
                                                               : torch::full_like(cache.next_position, S));
  cache.length += S;
  if (last_only)
    x = rotate ? gather_rows(x, rot.to_back.narrow(1, S - 1, 1)) : x.narrow(1, S - 1, 1);
  else if (rotate)
    x = gather_rows(x, rot.to_back);
  return head(x);
}

void init_llama_weights(const ParamLayout& layout, const ModelConfig& config, torch::Tensor flat, uint64_t seed) {
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
