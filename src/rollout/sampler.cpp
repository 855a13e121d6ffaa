// Batched sampling: left-pad the prompts, prefill the KV cache, then one decode step per token
// (or, without the cache, a full forward over the growing sequence each step).
#include "unstuck/rollout/sampler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "unstuck/common/error.h"

namespace unstuck::rollout {
namespace {

// Logits (B, V) -> next tokens (B) and their log-probs under the temperature-scaled distribution.
// With `uniform` (B) defined, the token is the first whose cumulative probability exceeds
// uniform * total (inverse CDF; tokens filtered to probability 0 are never picked).
std::pair<torch::Tensor, torch::Tensor> sample(const torch::Tensor& logits, const SamplingConfig& s,
                                               at::Generator& gen, const torch::Tensor& uniform) {
  if (s.temperature == 0.0) {
    const torch::Tensor next = logits.argmax(-1);
    const torch::Tensor logp = torch::log_softmax(logits, -1).gather(1, next.unsqueeze(1)).squeeze(1);
    return {next, logp};
  }
  const torch::Tensor scaled = logits / s.temperature;
  const torch::Tensor logp_all = torch::log_softmax(scaled, -1);  // (B, V)
  torch::Tensor filtered = scaled.clone();
  const int64_t V = logits.size(-1);
  if (s.top_k > 0 && s.top_k < V) {
    const torch::Tensor kth = std::get<0>(scaled.topk(s.top_k, -1)).narrow(1, s.top_k - 1, 1);
    filtered.masked_fill_(scaled < kth, -INFINITY);
  }
  if (s.top_p < 1.0) {
    auto [sorted, order] = filtered.sort(-1, /*descending=*/true);
    const torch::Tensor cum = torch::softmax(sorted, -1).cumsum(-1);
    // Drop a token when the mass before it already reaches top_p (the top token always stays).
    const torch::Tensor drop_sorted = (cum - torch::softmax(sorted, -1)) >= s.top_p;
    filtered.scatter_(1, order, sorted.masked_fill(drop_sorted, -INFINITY));
  }
  const torch::Tensor probs = torch::softmax(filtered, -1);
  torch::Tensor next;
  if (uniform.defined()) {
    const torch::Tensor cum = probs.cumsum(-1);  // (B, V)
    const torch::Tensor target = (uniform.to(cum.scalar_type()) * cum.select(1, V - 1)).unsqueeze(1);
    next = (cum <= target).sum(-1).clamp_max(V - 1);
  } else {
    next = at::multinomial(probs, 1, false, gen).squeeze(1);
  }
  return {next, logp_all.gather(1, next.unsqueeze(1)).squeeze(1)};
}

}  // namespace

void validate_sampling(const SamplingConfig& s) {
  if (!(s.temperature >= 0)) throw UserError("rollout.temperature must be >= 0, got " + std::to_string(s.temperature));
  if (s.top_k < 0) throw UserError("rollout.top_k must be >= 0, got " + std::to_string(s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1)) throw UserError("rollout.top_p must be in (0, 1], got " + std::to_string(s.top_p));
  if (s.max_new_tokens < 1) throw UserError("rollout.max_new_tokens must be >= 1, got " + std::to_string(s.max_new_tokens));
}

std::vector<Completion> generate(const model::LlamaModel& model,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& o, at::Generator gen) {
  validate_sampling(o.sampling);
  torch::NoGradGuard no_grad;
  const int64_t B = int64_t(prompts.size());
  std::vector<Completion> out(B);
  if (B == 0) return out;
  int64_t P = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw UserError("generate: empty prompt");
    P = std::max<int64_t>(P, int64_t(p.size()));
  }
  const int64_t N = o.sampling.max_new_tokens;
  if (o.uniforms.defined() && (o.uniforms.dim() != 2 || o.uniforms.size(0) != B || o.uniforms.size(1) < N))
    throw std::invalid_argument("generate: uniforms must be (prompts, max_new_tokens)");
  if (P + N > model.config().max_seq_len)
    throw UserError("generate: prompt (" + std::to_string(P) + " tokens) + max_new_tokens (" +
                    std::to_string(N) + ") exceed model.max_seq_len (" +
                    std::to_string(model.config().max_seq_len) + ")");

  // Left-padded prompt batch: (B, P) tokens and validity.
  torch::Tensor tokens = torch::full({B, P + N}, int64_t(o.pad_id), torch::kLong);
  torch::Tensor valid = torch::zeros({B, P + N}, torch::kBool);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[b];
    const int64_t start = P - int64_t(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) tokens[b][start + int64_t(i)] = int64_t(p[i]);
    valid[b].narrow(0, start, int64_t(p.size())).fill_(true);
  }
  valid.narrow(1, P, N).fill_(true);

  model::KVCache cache;
  torch::Tensor logits;  // (B, V) of the last position
  if (o.use_cache) {
    cache = model.new_cache(B, P + N);
    logits = model.forward_cached(tokens.narrow(1, 0, P), cache, valid.narrow(1, 0, P)).select(1, P - 1);
  } else {
    logits = model.forward(tokens.narrow(1, 0, P), valid.narrow(1, 0, P)).select(1, P - 1);
  }
  std::vector<bool> done(B, false);
  int64_t remaining = B;
  for (int64_t t = 0; t < N && remaining > 0; ++t) {
    auto [next, logp] = sample(logits, o.sampling, gen, o.uniforms.defined() ? o.uniforms.select(1, t) : torch::Tensor());
    const auto next_a = next.accessor<int64_t, 1>();
    const auto logp_a = logp.accessor<float, 1>();
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      out[b].tokens.push_back(int32_t(next_a[b]));
      out[b].logprobs.push_back(logp_a[b]);
      if (o.eos_id >= 0 && next_a[b] == o.eos_id) {
        out[b].finish = FinishReason::eos;
        done[b] = true;
        --remaining;
      }
    }
    if (remaining == 0 || t + 1 == N) break;
    tokens.select(1, P + t).copy_(next);
    if (o.use_cache)
      logits = model.forward_cached(tokens.narrow(1, P + t, 1), cache).select(1, 0);
    else
      logits = model.forward(tokens.narrow(1, 0, P + t + 1), valid.narrow(1, 0, P + t + 1)).select(1, P + t);
  }
  return out;
}

}  // namespace unstuck::rollout
