// Chunked token log-probs (custom autograd function that recomputes each chunk's log-softmax in the
// backward), and the no-grad per-token entropy / exact KL / log-prob of the measurement pass.
#include "unstuck/algo/token_logprobs.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>

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

}  // namespace

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
