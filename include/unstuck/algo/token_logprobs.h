// Log-probabilities of sampled tokens, the exact KL to a reference and the entropy, computed a few
// completion positions at a time from the logits, so the (rows, T, V) log-softmax over the whole
// vocabulary is never materialized (at a 152k vocabulary that is what decides whether a step fits).
// Each chunk is a log-softmax over a (rows, chunk, V) slice: the values equal the unchunked ones.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace unstuck::algo {

// logits (n, T, V) float, may be a view; targets (n, T) int64. Returns (n, T): log_softmax(logits)
// gathered at the targets, chunk_tokens positions at a time (<= 0: all T at once). Differentiable
// w.r.t. logits: autograd keeps only the logits, and the backward recomputes each chunk's
// log-softmax, so neither pass holds more than one (n, chunk, V) slice besides the logits and their
// gradient. Values and gradients are bit-identical to log_softmax(logits, -1).gather(targets).
// Example: logits [[[0, ln 3]]], targets [[1]] -> [[ln 0.75]] (p = 3 / (1 + 3)).
torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_tokens);

// Per-token quantities of a policy on its sampled tokens, each (n, T), without gradients.
struct TokenStats {
  torch::Tensor logp;      // log-prob of the target token
  torch::Tensor entropy;   // -sum_v p log p
  torch::Tensor kl_exact;  // sum_v p (log p - log q) against the reference q; undefined without one
  torch::Tensor ref_logp;  // the reference's log-prob of the target token; undefined without one
};

// From policy logits (n, T, V) and optional reference logits of the same shape, chunk_tokens
// positions at a time (<= 0: all at once). No autograd graph is built.
TokenStats token_stats(const torch::Tensor& logits, const torch::Tensor& ref_logits, const torch::Tensor& targets,
                       int64_t chunk_tokens);

// The LM head fused with the log-probs: logits = hidden W^T, formed as LlamaModel::logits_of forms
// them (the product in hidden's dtype, then FP32), chunk_tokens positions of every row at a time in
// the forward and again (recomputed) in the backward, so neither pass ever holds an (n, T, V)
// tensor: the memory of the head is one (n, chunk, V) slice and its temporaries, whatever T is.
// Log-probs are logit[target] - logsumexp(logits), as the rollout's sampler computes them.
struct HeadInput {
  torch::Tensor hidden;  // (n, T, D) final-normed hidden states (LlamaModel::forward_completions_hidden)
  torch::Tensor weight;  // (V, D) the head (LlamaModel::head_weight)
};
struct HeadLogProbs {
  torch::Tensor logp;     // (n, T) differentiable w.r.t. the policy's hidden and weight
  torch::Tensor entropy;  // (n, T) differentiable likewise (for an entropy bonus)
  TokenStats stats;       // the same values detached, and kl_exact / ref_logp with a reference
};
// `ref`: the frozen reference's hidden states and head (no gradient), or undefined tensors.
// `weight_sink`: an FP32 tensor of the weight's shape that the backward adds the weight's gradient
// into (a chunk and a block of vocabulary rows at a time: no (V, D) gradient tensor is made); the
// weight then gets no gradient through autograd. Undefined: the weight's gradient is returned to
// autograd as usual. Without gradients (NoGradGuard or nothing requiring grad) no graph is built.
// Example: hidden [[[1, 0]]], W [[0, 0], [ln 3, 0]], targets [[1]] -> logp [[ln 0.75]].
HeadLogProbs head_log_probs(const HeadInput& policy, const HeadInput& ref, const torch::Tensor& targets,
                            int64_t chunk_tokens, const torch::Tensor& weight_sink = {});

}  // namespace unstuck::algo
