// Chunked token log-probs (custom autograd function that recomputes each chunk's log-softmax in the
// backward), and the no-grad per-token entropy / exact KL / log-prob of the measurement pass.
#include "unstuck/algo/token_logprobs.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>

namespace unstuck::algo {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t chunk_of(int64_t chunk_tokens, int64_t T) { return chunk_tokens > 0 ? std::min(chunk_tokens, T) : T; }

// The op sequence of log_softmax(x, -1).gather(-1, t) and of its autograd backward (gather's
// backward scatters into zeros, then log_softmax's backward kernel), one time slice at a time.
struct TokenLogProbFunction : torch::autograd::Function<TokenLogProbFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t chunk) {
    ctx->save_for_backward({logits, targets});
    ctx->saved_data["chunk"] = chunk;
    const int64_t T = logits.size(1);
    torch::Tensor out = torch::empty({logits.size(0), T}, logits.options());  // (n, T)
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
      const int64_t len = std::min(chunk, T - t0);
      const torch::Tensor lsm = torch::log_softmax(logits.narrow(1, t0, len), -1);  // (n, len, V)
      out.narrow(1, t0, len).copy_(lsm.gather(2, targets.narrow(1, t0, len).unsqueeze(2)).squeeze(2));
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& logits = saved[0];
    const torch::Tensor& targets = saved[1];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const torch::Tensor g = grads[0];  // (n, T)
    const int64_t T = logits.size(1);
    torch::Tensor grad_logits = torch::empty(logits.sizes(), logits.options());  // (n, T, V)
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
      const int64_t len = std::min(chunk, T - t0);
      const torch::Tensor lsm = torch::log_softmax(logits.narrow(1, t0, len), -1);  // recomputed
      const torch::Tensor idx = targets.narrow(1, t0, len).unsqueeze(2);
      const torch::Tensor g_tok = torch::zeros_like(lsm).scatter_add_(2, idx, g.narrow(1, t0, len).unsqueeze(2));
      grad_logits.narrow(1, t0, len).copy_(torch::_log_softmax_backward_data(g_tok, lsm, 2, lsm.scalar_type()));
    }
    return {grad_logits, torch::Tensor(), torch::Tensor()};
  }
};

// Vocabulary rows of the head's weight gradient formed at a time (BF16 / FP16: a temporary of this
// many rows; FP32 accumulates in place).
constexpr int64_t kWeightGradRows = 16384;

using Opt = std::optional<torch::Tensor>;
bool given(const Opt& t) { return t.has_value() && t->defined(); }

// Logits of positions [t0, t0 + len) of every row: (n, len, V) FP32, the product in the hidden
// states' dtype. The rows go in as one contiguous 2-D matrix: a strided 3-D slice would make
// libtorch's matmul broadcast the (V, D) weight over the batch (a copy of it per row).
torch::Tensor chunk_logits(const torch::Tensor& hidden, const torch::Tensor& weight, int64_t t0, int64_t len) {
  const int64_t n = hidden.size(0), D = hidden.size(2);
  const torch::Tensor h = hidden.narrow(1, t0, len).reshape({n * len, D});
  return at::linear(h, weight).to(torch::kFloat32).view({n, len, weight.size(0)});
}

// The fused head of head_log_probs(): outputs logp, entropy (differentiable) and, with a
// reference, kl_exact and ref_logp (not differentiable; empty placeholders without one). Saves the
// hidden states, the weight, the targets and per position the log-sum-exp and the entropy.
struct HeadLogProbFunction : torch::autograd::Function<HeadLogProbFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, const Opt& ref_hidden, const Opt& ref_weight,
                               int64_t chunk, const Opt& sink) {
    const int64_t n = hidden.size(0), T = hidden.size(1);
    const auto f32 = hidden.options().dtype(torch::kFloat32);
    const bool with_ref = given(ref_hidden);
    torch::Tensor logp = torch::empty({n, T}, f32), entropy = torch::empty({n, T}, f32),
                  lse = torch::empty({n, T}, f32);
    torch::Tensor kl = with_ref ? torch::empty({n, T}, f32) : torch::empty({0}, f32);
    torch::Tensor ref_logp = with_ref ? torch::empty({n, T}, f32) : torch::empty({0}, f32);
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
      const int64_t len = std::min(chunk, T - t0);
      const torch::Tensor idx = targets.narrow(1, t0, len).unsqueeze(2);
      torch::Tensor z = chunk_logits(hidden, weight, t0, len);  // (n, len, V)
      const torch::Tensor l = z.logsumexp(-1);                  // (n, len)
      lse.narrow(1, t0, len).copy_(l);
      logp.narrow(1, t0, len).copy_(z.gather(2, idx).squeeze(2) - l);
      z.sub_(l.unsqueeze(2));  // log p
      torch::Tensor p = z.exp();
      if (with_ref) {  // in place where it can be: two (n, len, V) slices with the policy's
        torch::Tensor r = chunk_logits(*ref_hidden, *ref_weight, t0, len);
        const torch::Tensor rl = r.logsumexp(-1);
        ref_logp.narrow(1, t0, len).copy_(r.gather(2, idx).squeeze(2) - rl);
        r.sub_(rl.unsqueeze(2)).neg_().add_(z);  // log p - log q
        kl.narrow(1, t0, len).copy_(r.mul_(p).sum(-1));
      }
      entropy.narrow(1, t0, len).copy_(p.mul_(z).sum(-1).neg_());
    }
    ctx->save_for_backward({hidden, weight, targets, lse, entropy});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["sink"] = given(sink) ? *sink : torch::Tensor();
    ctx->mark_non_differentiable({kl, ref_logp});
    return {logp, entropy, kl, ref_logp};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3],
                        &entropy = saved[4];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const torch::Tensor sink = ctx->saved_data["sink"].toTensor();
    const int64_t n = hidden.size(0), T = hidden.size(1), V = weight.size(0), D = weight.size(1);
    const torch::Tensor g_logp = grads[0].defined() ? grads[0] : torch::zeros({n, T}, lse.options());
    const torch::Tensor& g_entropy = grads[1];  // undefined without an entropy bonus
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    // A frozen head (LoRA) takes no weight gradient: no (V, D) buffer, no products for it.
    const bool weight_grad = sink.defined() || ctx->needs_input_grad(1);
    torch::Tensor grad_weight = sink.defined() || !weight_grad ? sink : torch::zeros({V, D}, lse.options());  // FP32
    const bool fp32 = hidden.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
      const int64_t len = std::min(chunk, T - t0);
      torch::Tensor z = chunk_logits(hidden, weight, t0, len);  // recomputed (n, len, V)
      z.sub_(lse.narrow(1, t0, len).unsqueeze(2));              // log p
      const torch::Tensor g = g_logp.narrow(1, t0, len).unsqueeze(2);
      // d logp / dz = onehot(target) - p; d entropy / dz = -p (log p + entropy). In place: at most
      // two (n, len, V) FP32 slices.
      torch::Tensor grad_z;
      if (g_entropy.defined()) {
        grad_z = z.exp();
        z.add_(entropy.narrow(1, t0, len).unsqueeze(2)).mul_(g_entropy.narrow(1, t0, len).unsqueeze(2)).add_(g);
        grad_z.mul_(z).neg_();
      } else {
        grad_z = z.exp_().mul_(-g);
      }
      grad_z.scatter_add_(2, targets.narrow(1, t0, len).unsqueeze(2), g);
      // The gradient of the logits in the product's dtype, as autograd's backward of the cast would
      // give it, then the product's backward: d hidden = grad W, d W = grad^T hidden.
      const torch::Tensor g2 = grad_z.to(hidden.scalar_type()).view({-1, V});  // (n * len, V)
      const torch::Tensor h2 = hidden.narrow(1, t0, len).reshape({-1, D});
      grad_hidden.narrow(1, t0, len).copy_(g2.mm(weight).view({n, len, D}));
      for (int64_t v0 = 0; weight_grad && v0 < V; v0 += kWeightGradRows) {
        const int64_t rows = std::min(kWeightGradRows, V - v0);
        torch::Tensor dst = grad_weight.narrow(0, v0, rows);
        if (fp32)
          dst.addmm_(g2.narrow(1, v0, rows).t(), h2);
        else
          dst.add_(g2.narrow(1, v0, rows).t().mm(h2));
      }
    }
    torch::Tensor weight_out = sink.defined() || !weight_grad ? torch::Tensor() : grad_weight.to(weight.scalar_type());
    return {grad_hidden,     weight_out,      torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

HeadLogProbs head_log_probs(const HeadInput& policy, const HeadInput& ref, const torch::Tensor& targets,
                            int64_t chunk_tokens, const torch::Tensor& weight_sink) {
  const int64_t T = policy.hidden.size(1);
  const auto opt = [](const torch::Tensor& t) { return t.defined() ? Opt(t) : std::nullopt; };
  const variable_list out = HeadLogProbFunction::apply(policy.hidden, policy.weight, targets, opt(ref.hidden),
                                                       opt(ref.weight), chunk_of(chunk_tokens, T), opt(weight_sink));
  HeadLogProbs r;
  r.logp = out[0];
  r.entropy = out[1];
  r.stats.logp = out[0].detach();
  r.stats.entropy = out[1].detach();
  if (ref.hidden.defined()) {
    r.stats.kl_exact = out[2];
    r.stats.ref_logp = out[3];
  }
  return r;
}

torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_tokens) {
  return TokenLogProbFunction::apply(logits, targets, chunk_of(chunk_tokens, logits.size(1)));
}

TokenStats token_stats(const torch::Tensor& logits, const torch::Tensor& ref_logits, const torch::Tensor& targets,
                       int64_t chunk_tokens) {
  torch::NoGradGuard no_grad;
  const int64_t n = logits.size(0), T = logits.size(1), chunk = chunk_of(chunk_tokens, T);
  const bool with_ref = ref_logits.defined();
  const auto opts = logits.options();
  TokenStats s;
  s.logp = torch::empty({n, T}, opts);
  s.entropy = torch::empty({n, T}, opts);
  if (with_ref) {
    s.kl_exact = torch::empty({n, T}, opts);
    s.ref_logp = torch::empty({n, T}, opts);
  }
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t len = std::min(chunk, T - t0);
    const torch::Tensor idx = targets.narrow(1, t0, len).unsqueeze(2);
    const torch::Tensor lp = torch::log_softmax(logits.narrow(1, t0, len), -1);  // (n, len, V)
    const torch::Tensor p = lp.exp();
    s.logp.narrow(1, t0, len).copy_(lp.gather(2, idx).squeeze(2));
    s.entropy.narrow(1, t0, len).copy_(-(p * lp).sum(-1));
    if (with_ref) {
      const torch::Tensor ref = torch::log_softmax(ref_logits.narrow(1, t0, len).to(lp.scalar_type()), -1);
      s.kl_exact.narrow(1, t0, len).copy_((p * (lp - ref)).sum(-1));
      s.ref_logp.narrow(1, t0, len).copy_(ref.gather(2, idx).squeeze(2));
    }
  }
  return s;
}

}  // namespace unstuck::algo
