// The model's autograd functions (llama_autograd.h): checkpointed blocks, lora.dropout's adapter
// product, and the layers whose weight gradients go into FP32 sinks.
#include "model/llama_autograd.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#if defined(UNSTUCK_HAVE_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>

#include "model/lora_dropout.h"

namespace unstuck::model {
namespace {

// Activation checkpointing: the forward keeps only the block's input; the backward recomputes the
// block with gradients on and differentiates it. The recomputation is the same deterministic code
// on the same inputs, so the gradients equal the plain path's. With shared prompts
// (forward_completions) a prompt-pass block also returns its keys and values (`capture`), and a
// completion-pass block takes its prompt's (prompt_k, prompt_v, of_row) as inputs whose gradients
// it returns.
struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  using Opt = std::optional<torch::Tensor>;
  static bool given(const Opt& t) { return t.has_value() && t->defined(); }

  // Runs the block; `prompt` holds the prompt keys/values of a completion pass (else undefined).
  static torch::autograd::variable_list run(const LlamaModel* model, int64_t layer, const torch::Tensor& x,
                                            const torch::Tensor& cos, const torch::Tensor& sin,
                                            const torch::Tensor& mask, bool causal, bool capture,
                                            const torch::Tensor& prompt_k, const torch::Tensor& prompt_v,
                                            const torch::Tensor& of_row, const DropoutPass* dropout) {
    PromptKV kv;
    PromptKV* io = nullptr;
    if (capture) {
      kv.capture = true;
      io = &kv;
    } else if (prompt_k.defined()) {
      kv.k.resize(std::size_t(layer) + 1);
      kv.v.resize(std::size_t(layer) + 1);
      kv.k.back() = prompt_k;
      kv.v.back() = prompt_v;
      kv.of_row = of_row;
      io = &kv;
    }
    torch::Tensor y = model->block(layer, x, cos, sin, mask, causal, nullptr, io, dropout);
    if (capture) return {y, kv.k[0], kv.v[0]};
    return {y};
  }

  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& cos, const torch::Tensor& sin, const Opt& mask,
                                                const Opt& prompt_k, const Opt& prompt_v, const Opt& of_row,
                                                at::TensorList weights, const LlamaModel* model, int64_t layer,
                                                bool causal, bool capture, const DropoutPass* dropout) {
    const bool has_mask = given(mask), has_prompt = given(prompt_k);
    ctx->saved_data["model"] = int64_t(reinterpret_cast<intptr_t>(model));
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["capture"] = capture;
    ctx->saved_data["has_mask"] = has_mask;
    ctx->saved_data["has_prompt"] = has_prompt;
    ctx->saved_data["weights"] = int64_t(weights.size());
    ctx->saved_data["dropout"] = dropout != nullptr;
    if (dropout) {  // the recompute regenerates the same masks from these
      ctx->saved_data["drop_key"] = int64_t(dropout->key);
      ctx->saved_data["drop_prompts"] = dropout->prompts;
      ctx->saved_data["drop_ids"] = dropout->ids;
      ctx->saved_data["drop_positions"] = dropout->positions;
    }
    torch::autograd::variable_list saved{x, cos, sin, has_mask ? *mask : torch::Tensor()};
    if (has_prompt) saved.insert(saved.end(), {*prompt_k, *prompt_v, *of_row});
    ctx->save_for_backward(saved);
    return run(model, layer, x, cos, sin, has_mask ? *mask : torch::Tensor(), causal, capture,
               has_prompt ? *prompt_k : torch::Tensor(), has_prompt ? *prompt_v : torch::Tensor(),
               has_prompt ? *of_row : torch::Tensor(), dropout);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto* model = reinterpret_cast<const LlamaModel*>(intptr_t(ctx->saved_data["model"].toInt()));
    const int64_t layer = ctx->saved_data["layer"].toInt();
    const bool capture = ctx->saved_data["capture"].toBool(), has_prompt = ctx->saved_data["has_prompt"].toBool();
    const torch::Tensor x = saved[0].detach().requires_grad_(true);
    const torch::Tensor mask = ctx->saved_data["has_mask"].toBool() ? saved[3] : torch::Tensor();
    torch::Tensor prompt_k, prompt_v;
    if (has_prompt) {
      prompt_k = saved[4].detach().requires_grad_(true);
      prompt_v = saved[5].detach().requires_grad_(true);
    }
    DropoutPass dropout;
    const bool dropped = ctx->saved_data["dropout"].toBool();
    if (dropped)
      dropout = {uint64_t(ctx->saved_data["drop_key"].toInt()), ctx->saved_data["drop_prompts"].toBool(),
                 ctx->saved_data["drop_ids"].toTensor(), ctx->saved_data["drop_positions"].toTensor()};
    torch::autograd::variable_list outputs;
    {
      torch::AutoGradMode grad_on(true);
      outputs = run(model, layer, x, saved[1], saved[2], mask, ctx->saved_data["causal"].toBool(), capture, prompt_k,
                    prompt_v, has_prompt ? saved[6] : torch::Tensor(), dropped ? &dropout : nullptr);
    }
    torch::autograd::variable_list grads_of_outputs;
    for (std::size_t i = 0; i < outputs.size(); ++i)  // a captured key/value no later layer used: zero
      grads_of_outputs.push_back(grad_out[i].defined() ? grad_out[i] : torch::zeros_like(outputs[i]));
    torch::autograd::variable_list inputs{x};
    if (has_prompt) inputs.insert(inputs.end(), {prompt_k, prompt_v});
    for (const torch::Tensor& w : block_trainable(*model, layer)) inputs.push_back(w);
    TORCH_INTERNAL_ASSERT(int64_t(inputs.size()) == 1 + 2 * has_prompt + ctx->saved_data["weights"].toInt());
    const auto grads = torch::autograd::grad(outputs, inputs, grads_of_outputs, false, false, /*allow_unused=*/true);
    // One entry per forward argument: x, cos, sin, mask, prompt_k, prompt_v, of_row, each weight,
    // model, layer, causal, capture, dropout.
    torch::autograd::variable_list out{grads[0], {}, {}, {}};
    out.push_back(has_prompt ? grads[1] : torch::Tensor());
    out.push_back(has_prompt ? grads[2] : torch::Tensor());
    out.push_back(torch::Tensor());
    out.insert(out.end(), grads.begin() + 1 + 2 * has_prompt, grads.end());
    out.insert(out.end(), 5, torch::Tensor());
    return out;
  }
};

// lora.dropout's keep bits (B, T, features) uint8 of one module in a pass (model/lora_dropout.h),
// on the pass's device.
torch::Tensor dropout_keep(const torch::Tensor& ids, const torch::Tensor& positions, int64_t features,
                           DropoutStream stream, uint32_t threshold) {
  const int64_t B = positions.size(0), T = positions.size(1);
  torch::Tensor keep = torch::empty({B, T, features}, positions.options().dtype(torch::kUInt8));
  if (keep.is_cuda()) {
#if defined(UNSTUCK_HAVE_CUDA)
    const torch::Tensor i = ids.contiguous(), p = positions.contiguous();
    dropout_keep_cuda(keep.data_ptr<uint8_t>(), i.data_ptr<int64_t>(), p.data_ptr<int64_t>(), B, T, features, stream,
                      threshold, c10::cuda::getCurrentCUDAStream().stream());
    return keep;
#else
    throw std::logic_error("lora.dropout on CUDA needs a build with CUDA kernels");
#endif
  }
  const torch::Tensor i = ids.contiguous(), p = positions.contiguous();
  const int64_t *ip = i.data_ptr<int64_t>(), *pp = p.data_ptr<int64_t>();
  uint8_t* out = keep.data_ptr<uint8_t>();
  at::parallel_for(
      0, B * T, std::max<int64_t>(1, 16384 / std::max<int64_t>(features, 1)), [&](int64_t first, int64_t last) {
        for (int64_t bt = first; bt < last; ++bt)
          dropout_keep_row(stream, threshold, uint32_t(ip[bt / T]), uint32_t(pp[bt]), features, out + bt * features);
      });
  return keep;
}

// x A^T of an adapter with lora.dropout on its input: (x * keep / (1 - p)) A^T. The keep bits are
// regenerated in the backward from (key, tag, ids, positions) instead of being kept, so the pass
// holds x (which the adapter's product keeps anyway) and no mask.
struct DroppedLinear : public torch::autograd::Function<DroppedLinear> {
  static torch::Tensor dropped(const torch::Tensor& x, const torch::Tensor& ids, const torch::Tensor& positions,
                               int64_t key, int64_t tag, double p) {
    const torch::Tensor keep =
        dropout_keep(ids, positions, x.size(-1), DropoutStream{uint64_t(key), uint32_t(tag)}, dropout_threshold(p));
    return x.mul(keep).mul_(1.0 / (1.0 - p));
  }
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& a,
                               const torch::Tensor& ids, const torch::Tensor& positions, int64_t key, int64_t tag,
                               double p) {
    ctx->save_for_backward({x, a});
    ctx->saved_data["ids"] = ids;
    ctx->saved_data["positions"] = positions;
    ctx->saved_data["key"] = key;
    ctx->saved_data["tag"] = tag;
    ctx->saved_data["p"] = p;
    return at::linear(dropped(x, ids, positions, key, tag, p), a);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &a = saved[1];
    const torch::Tensor ids = ctx->saved_data["ids"].toTensor(), positions = ctx->saved_data["positions"].toTensor();
    const int64_t key = ctx->saved_data["key"].toInt(), tag = ctx->saved_data["tag"].toInt();
    const double p = ctx->saved_data["p"].toDouble();
    const torch::Tensor keep =
        dropout_keep(ids, positions, x.size(-1), DropoutStream{uint64_t(key), uint32_t(tag)}, dropout_threshold(p));
    const double scale = 1.0 / (1.0 - p);
    const torch::Tensor g = grad_out[0].reshape({-1, a.size(0)});                             // (N, r)
    const torch::Tensor grad_a = g.t().mm(x.mul(keep).mul_(scale).reshape({-1, a.size(1)}));  // (r, in)
    const torch::Tensor grad_x = g.mm(a).view(x.sizes()).mul_(keep).mul_(scale);
    return {grad_x, grad_a, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Weight-gradient rows formed at a time by LinearIntoSink (a BF16 / FP16 temporary of this many rows).
constexpr int64_t kSinkRows = 4096;

// sink (out, in) FP32 += g^T x for g (N, out), x (N, in): in place for FP32, else a block of rows at
// a time in the operands' dtype (the product autograd's linear backward forms), then widened.
void add_weight_grad(torch::Tensor& sink, const torch::Tensor& g, const torch::Tensor& x) {
  if (g.scalar_type() == torch::kFloat32 && x.scalar_type() == torch::kFloat32) {
    sink.addmm_(g.t(), x);
    return;
  }
  for (int64_t r = 0; r < sink.size(0); r += kSinkRows) {
    const int64_t rows = std::min(kSinkRows, sink.size(0) - r);
    sink.narrow(0, r, rows).add_(g.narrow(1, r, rows).t().mm(x));
  }
}

// A linear layer whose weight (and bias) gradients are added straight into FP32 sinks (their ranges
// of the trainer's flat gradient) in the backward pass: they are never autograd outputs, so the
// engine never holds one layer's weight gradient while it waits for the other uses of the weight
// (a shared prompt pass, the completion pass) to be differentiated.
struct LinearIntoSink : public torch::autograd::Function<LinearIntoSink> {
  using Opt = std::optional<torch::Tensor>;
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const Opt& b, const torch::Tensor& w_sink, const Opt& b_sink) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["w_sink"] = w_sink;
    ctx->saved_data["b_sink"] = b_sink.has_value() ? *b_sink : torch::Tensor();
    return b.has_value() && b->defined() ? at::linear(x, w, *b) : at::linear(x, w);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    torch::Tensor w_sink = ctx->saved_data["w_sink"].toTensor(), b_sink = ctx->saved_data["b_sink"].toTensor();
    const torch::Tensor g = grad_out[0].reshape({-1, w.size(0)});  // (N, out)
    const torch::Tensor x2 = x.reshape({-1, w.size(1)});           // (N, in)
    add_weight_grad(w_sink, g, x2);
    if (b_sink.defined()) b_sink.add_(g.sum(0, false, torch::kFloat32));
    return {g.mm(w).view(x.sizes()), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The embedding lookup whose backward adds each looked-up row's gradient into an FP32 sink (the
// embedding's range of a flat gradient) instead of building a dense (V, D) gradient.
struct EmbeddingIntoSink : public torch::autograd::Function<EmbeddingIntoSink> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& weight,
                               const torch::Tensor& tokens, const torch::Tensor& sink) {
    ctx->saved_data["tokens"] = tokens;
    ctx->saved_data["sink"] = sink;
    return at::embedding(weight, tokens);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const torch::Tensor ids = ctx->saved_data["tokens"].toTensor().reshape({-1});
    torch::Tensor sink = ctx->saved_data["sink"].toTensor();
    const torch::Tensor g = grad_out[0].reshape({ids.size(0), -1});  // (B*T, D)
    constexpr int64_t kRows = 4096;                                  // rows widened to FP32 at a time
    for (int64_t r = 0; r < ids.size(0); r += kRows) {
      const int64_t n = std::min(kRows, ids.size(0) - r);
      sink.index_add_(0, ids.narrow(0, r, n), g.narrow(0, r, n).to(torch::kFloat32));
    }
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::vector<torch::Tensor> block_trainable(const LlamaModel& model, int64_t layer) {
  const LayerWeights& w = model.layer_weights(layer);
  std::vector<torch::Tensor> out;
  for (const torch::Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.bq, &w.bk, &w.bv, &w.bo, &w.q_norm,
                                 &w.k_norm, &w.mlp_norm, &w.w_gate, &w.w_up, &w.w_down})
    if (t->defined() && t->requires_grad()) out.push_back(*t);
  if (model.has_adapters())
    for (int m = 0; m < kLoraModules; ++m) {
      const auto& [a, b] = model.adapter(layer, LoraModule(m));
      for (const torch::Tensor* t : {&a, &b})
        if (t->defined() && t->requires_grad()) out.push_back(*t);
    }
  return out;
}

std::vector<torch::Tensor> checkpointed_block(const torch::Tensor& x, const torch::Tensor& cos,
                                              const torch::Tensor& sin, const std::optional<torch::Tensor>& mask,
                                              const std::optional<torch::Tensor>& prompt_k,
                                              const std::optional<torch::Tensor>& prompt_v,
                                              const std::optional<torch::Tensor>& of_row, at::TensorList weights,
                                              const LlamaModel* model, int64_t layer, bool causal, bool capture,
                                              const DropoutPass* dropout) {
  return CheckpointedBlock::apply(x, cos, sin, mask, prompt_k, prompt_v, of_row, weights, model, layer, causal, capture,
                                  dropout);
}

torch::Tensor linear_into_sink(const torch::Tensor& x, const torch::Tensor& w, const std::optional<torch::Tensor>& b,
                               const torch::Tensor& w_sink, const std::optional<torch::Tensor>& b_sink) {
  return LinearIntoSink::apply(x, w, b, w_sink, b_sink);
}

torch::Tensor embedding_into_sink(const torch::Tensor& weight, const torch::Tensor& tokens, const torch::Tensor& sink) {
  return EmbeddingIntoSink::apply(weight, tokens, sink);
}

torch::Tensor lora_dropout_keep(const DropoutPass& pass, int64_t layer, LoraModule m, int64_t features, double p) {
  return dropout_keep(pass.ids, pass.positions, features,
                      DropoutStream{pass.key, dropout_tag(layer, int(m), pass.prompts)}, dropout_threshold(p));
}

torch::Tensor lora_dropout_linear(const torch::Tensor& x, const torch::Tensor& a, const DropoutPass& pass,
                                  int64_t layer, LoraModule m, double p) {
  return DroppedLinear::apply(x, a, pass.ids, pass.positions, int64_t(pass.key),
                              int64_t(dropout_tag(layer, int(m), pass.prompts)), p);
}

}  // namespace unstuck::model
