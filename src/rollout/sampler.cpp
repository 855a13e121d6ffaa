// Batched sampling on the model's device: left-pad the prompts, prefill the KV cache (last position's
// logits only), then one decode step per token (or, without the cache, a full forward over the
// growing sequence each step). Tokens and log-probs are written into device tensors; rows that
// sampled a stop token leave the decode batch; the host reads the results once at the end.
#include "unstuck/rollout/sampler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#if defined(UNSTUCK_HAVE_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

#include "rollout/decode_graphs.h"
#include "rollout/sample_kernel.h"
#include "unstuck/common/error.h"
#include "unstuck/rollout/sampling_uniform.h"

namespace unstuck::rollout {
namespace {

// Logits (A, V) -> next tokens (A) and their log-probs under the temperature-scaled distribution
// (before top-k / top-p), log p = scaled[token] - logsumexp(scaled): no (A, V) log-softmax is kept.
// The token is the first whose cumulative probability exceeds uniform * total (inverse CDF over the
// filtered, unnormalized probabilities; tokens filtered to probability 0 are never picked). libtorch's
// ops, five passes over the logits: the path on a device, and the CPU kernel's baseline.
std::pair<torch::Tensor, torch::Tensor> sample_with_ops(const torch::Tensor& logits, const SamplingConfig& s,
                                                        const torch::Tensor& uniform) {
  if (s.temperature == 0.0) {
    const torch::Tensor next = logits.argmax(-1);  // (A)
    return {next, logits.gather(1, next.unsqueeze(1)).squeeze(1) - logits.logsumexp(-1)};
  }
  const torch::Tensor scaled = s.temperature == 1.0 ? logits : logits / s.temperature;  // (A, V)
  const torch::Tensor lse = scaled.logsumexp(-1, true);                                 // (A, 1)
  const int64_t V = logits.size(-1);
  torch::Tensor filtered = scaled;
  if (s.top_k > 0 && s.top_k < V) {
    const torch::Tensor kth = std::get<0>(scaled.topk(s.top_k, -1)).narrow(1, s.top_k - 1, 1);
    filtered = scaled.masked_fill(scaled < kth, -INFINITY);
  }
  if (s.top_p < 1.0) {
    auto [sorted, order] = filtered.sort(-1, /*descending=*/true);
    const torch::Tensor p = torch::softmax(sorted, -1);
    // Drop a token when the mass before it already reaches top_p (the top token always stays).
    const torch::Tensor drop_sorted = (p.cumsum(-1) - p) >= s.top_p;
    filtered = filtered.scatter(1, order, sorted.masked_fill(drop_sorted, -INFINITY));
  }
  const torch::Tensor cum = (filtered - lse).exp_().cumsum(-1);                                       // (A, V)
  const torch::Tensor target = uniform.to(cum.scalar_type()).unsqueeze(1) * cum.narrow(1, V - 1, 1);  // (A, 1)
  const torch::Tensor next =
      at::searchsorted(cum, target, /*out_int32=*/false, /*right=*/true).squeeze(1).clamp_max(V - 1);
  return {next, scaled.gather(1, next.unsqueeze(1)).squeeze(1) - lse.squeeze(1)};
}

// The same draw by the fused CPU kernel (sample_kernel.h): one read of each row's logits, rows in
// parallel.
std::pair<torch::Tensor, torch::Tensor> sample_with_kernel(const torch::Tensor& logits, const SamplingConfig& s,
                                                           const torch::Tensor& uniform) {
  const int64_t A = logits.size(0);
  const SampleRowsShape shape{logits.size(1), logits.stride(0), float(s.temperature), s.top_k, s.top_p};
  const torch::Tensor u = uniform.defined() ? uniform.to(torch::kFloat32).contiguous() : torch::Tensor();
  torch::Tensor next = torch::empty({A}, logits.options().dtype(torch::kLong));
  torch::Tensor logp = torch::empty({A}, logits.options());
  const float* x = logits.data_ptr<float>();
  const float* uniforms = u.defined() ? u.data_ptr<float>() : nullptr;
  if (logits.is_cuda()) {
#if defined(UNSTUCK_HAVE_CUDA)
    sample_rows_cuda(x, uniforms, shape, A, next.data_ptr<int64_t>(), logp.data_ptr<float>(),
                     c10::cuda::getCurrentCUDAStream(logits.device().index()).stream());
    return {next, logp};
#else
    throw std::logic_error("the fused sampler on CUDA needs a build with CUDA kernels");
#endif
  }
  at::parallel_for(0, A, 1, [&](int64_t first, int64_t last) {
    sample_rows_f32(x, uniforms, shape, next.data_ptr<int64_t>(), logp.data_ptr<float>(), first, last);
  });
  return {next, logp};
}

// The decode loop's model side, one implementation per decode mode: the prompts' prefill gives the
// first step's logits; each later step turns the previous step's tokens into the next (a forward and
// the sampling); rows that finished leave the decode batch when compacting is worth it.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Tokens and log-probs (A) of step t for the A rows of the decode batch: `prev` (A) are step t-1's
  // tokens (unread at t = 0), `u` (A) the uniforms (undefined when greedy).
  std::pair<torch::Tensor, torch::Tensor> step(int64_t t, const torch::Tensor& prev, const torch::Tensor& u, int64_t A,
                                               const SamplingConfig& s) {
    if (t == 0) return sample_logits(first_, s, u);
    return next(t, prev, u, A, s);
  }
  // Whether `finished` of the A rows (of B at the start) should leave now: a compaction costs about
  // one step's attention reads, so the batch drops rows once an eighth of it has finished.
  virtual bool compact(int64_t finished, int64_t A, int64_t /*B*/) const { return finished * 8 >= A; }
  // Keeps the rows `keep` (ascending) of the decode batch.
  virtual void keep_rows(const torch::Tensor& keep) = 0;

 protected:
  virtual std::pair<torch::Tensor, torch::Tensor> next(int64_t t, const torch::Tensor& prev, const torch::Tensor& u,
                                                       int64_t A, const SamplingConfig& s) = 0;
  torch::Tensor first_;  // (B, V) the prefill's logits at each row's last prompt position
};

// Without a cache (the reference path): a full forward over the growing sequence every step.
class RecomputeDecoder : public Decoder {
 public:
  RecomputeDecoder(const model::LlamaModel& model, const torch::Tensor& prompt, const torch::Tensor& valid, int64_t N,
                   int32_t pad_id)
      : model_(model), P_(prompt.size(1)) {
    seq_ = torch::cat({prompt, torch::full({prompt.size(0), N}, int64_t(pad_id), prompt.options())}, 1);
    if (valid.defined()) valid_ = torch::cat({valid, torch::ones({prompt.size(0), N}, valid.options())}, 1);
    first_ = model.forward(prompt, valid).select(1, P_ - 1);
  }
  void keep_rows(const torch::Tensor& keep) override {
    seq_ = seq_.index_select(0, keep);
    if (valid_.defined()) valid_ = valid_.index_select(0, keep);
  }

 protected:
  std::pair<torch::Tensor, torch::Tensor> next(int64_t t, const torch::Tensor& prev, const torch::Tensor& u, int64_t,
                                               const SamplingConfig& s) override {
    seq_.select(1, P_ + t - 1).copy_(prev);
    const int64_t L = P_ + t;
    const torch::Tensor logits =
        model_.forward(seq_.narrow(1, 0, L), valid_.defined() ? valid_.narrow(1, 0, L) : torch::Tensor())
            .select(1, L - 1);
    return sample_logits(logits, s, u);
  }

 private:
  const model::LlamaModel& model_;
  int64_t P_;
  torch::Tensor seq_, valid_;  // (A, P + N) tokens and validity
};

// DecodeMode dynamic: one cached forward of the previous tokens per step, over a cache that
// shrinks with the batch. The prefill runs once per distinct prompt when rows share one (a GRPO
// group), its keys and values copied to the rows.
class CachedDecoder : public Decoder {
 public:
  CachedDecoder(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                const torch::Tensor& prompt, const torch::Tensor& valid, int64_t N, bool share_prompts)
      : model_(model), cache_(model.new_cache(prompt.size(0), prompt.size(1) + N)) {
    const PromptGroups groups = share_prompts ? consecutive_prompt_groups(prompts) : PromptGroups{};
    if (!share_prompts || int64_t(groups.first_rows.size()) == prompt.size(0)) {
      first_ = model.forward_cached(prompt, cache_, valid, /*last_only=*/true).select(1, 0);
      return;
    }
    const torch::Tensor firsts = torch::tensor(groups.first_rows, torch::kLong).to(prompt.device());
    const torch::Tensor rows = torch::tensor(groups.of_row, torch::kLong).to(prompt.device());
    model::KVCache shared = model.new_cache(int64_t(groups.first_rows.size()), prompt.size(1));
    first_ = model
                 .forward_cached(prompt.index_select(0, firsts), shared,
                                 valid.defined() ? valid.index_select(0, firsts) : torch::Tensor(), /*last_only=*/true)
                 .select(1, 0)
                 .index_select(0, rows);
    cache_.copy_rows_from(shared, rows);
  }
  void keep_rows(const torch::Tensor& keep) override { cache_.keep_rows(keep); }

 protected:
  std::pair<torch::Tensor, torch::Tensor> next(int64_t, const torch::Tensor& prev, const torch::Tensor& u, int64_t,
                                               const SamplingConfig& s) override {
    return sample_logits(model_.forward_cached(prev.unsqueeze(1), cache_, {}, /*last_only=*/true).select(1, 0), s, u);
  }
  const model::LlamaModel& model_;
  model::KVCache cache_;
};

// DecodeMode fixed and graphs: fixed-shape steps over a cache whose buffers stay where they are. The
// step for A unfinished rows computes decode_bucket(A, rows) rows (those after the first A are stale:
// finished or moved rows, never read) and attends over the filled slots rounded up to a multiple of
// kAttendSlots, so a run meets a handful of shapes. Each step writes its inputs into buffers of its
// own and runs the forward and the sampling as one unit: eagerly, or as a CUDA graph captured the
// first time its (rows, slots) shape comes up (decode_graphs.h).
class FixedDecoder : public CachedDecoder {
 public:
  static constexpr int64_t kAttendSlots = 128;

  FixedDecoder(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
               const torch::Tensor& prompt, const torch::Tensor& valid, int64_t N, bool share_prompts, bool graphs)
      : CachedDecoder(model, prompts, prompt, valid, N, share_prompts),
        graphs_(graphs ? std::make_unique<DecodeGraphs>(model.flat_weights().device().index()) : nullptr) {
    cache_.reserve(cache_.capacity);  // every slot allocated: the buffers never move
    const auto opts = cache_.next_position.options();
    cache_.slot = torch::full({1}, cache_.length, opts);
    tokens_ = torch::zeros({prompt.size(0), 1}, opts);                        // (rows, 1) each row's last token
    uniforms_ = torch::zeros({prompt.size(0)}, opts.dtype(torch::kFloat32));  // (rows) this step's uniforms
  }
  // Rows leave when the unfinished ones fit a smaller bucket (the rows a step computes), at the same
  // points on every device.
  bool compact(int64_t finished, int64_t A, int64_t B) const override {
    return decode_bucket(A - finished, B) < decode_bucket(A, B);
  }
  void keep_rows(const torch::Tensor& keep) override { cache_.move_rows_to_front(keep); }

 protected:
  std::pair<torch::Tensor, torch::Tensor> next(int64_t, const torch::Tensor& prev, const torch::Tensor& u, int64_t A,
                                               const SamplingConfig& s) override {
    const int64_t R = decode_bucket(A, tokens_.size(0));
    const int64_t S = std::min(cache_.capacity, (cache_.length + kAttendSlots) / kAttendSlots * kAttendSlots);
    tokens_.narrow(0, 0, A).copy_(prev.unsqueeze(1));
    if (u.defined()) uniforms_.narrow(0, 0, A).copy_(u);
    const bool sampled = u.defined();
    const auto run = [this, R, S, sampled, &s] {
      model::KVCache view = cache_.first_rows(R);
      view.attend_slots = S;
      const torch::Tensor logits = model_.decode_step(tokens_.narrow(0, 0, R), view).select(1, 0);  // (R, V)
      auto [next, logp] = sample_logits(logits, s, sampled ? uniforms_.narrow(0, 0, R) : torch::Tensor());
      return std::vector<torch::Tensor>{next, logp};
    };
    const std::vector<torch::Tensor> out = graphs_ ? graphs_->run(R * (cache_.capacity + 1) + S, run) : run();
    cache_.length += 1;  // the host's count of the slot the step advanced on the device
    return {out[0].narrow(0, 0, A), out[1].narrow(0, 0, A)};
  }

 private:
  std::unique_ptr<DecodeGraphs> graphs_;
  torch::Tensor tokens_, uniforms_;
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> sample_logits(const torch::Tensor& logits, const SamplingConfig& s,
                                                      const torch::Tensor& uniform, SamplerPath path) {
  if (s.temperature != 0.0 && (!uniform.defined() || uniform.numel() != logits.size(0)))
    throw std::invalid_argument("sample_logits: sampling needs one uniform per row");
  const bool fits = logits.scalar_type() == torch::kFloat32 && logits.dim() == 2 && logits.stride(1) == 1;
  if (path == SamplerPath::kernel) {
    if (!fits) throw std::invalid_argument("sample_logits: the fused kernel takes (A, V) FP32 rows of stride 1");
    return sample_with_kernel(logits, s, uniform);
  }
  // On the CPU the kernel's log-probs too: a row's bits do not depend on the rows beside it, where
  // libtorch's logsumexp over a small vocabulary reduces differently as the decode batch shrinks
  // (GrpoDistTest.LoraAgreesAcrossWorldSizesAndResumes drifted past 1e-5 with it).
  if (path == SamplerPath::ops || !fits || !logits.is_cpu()) return sample_with_ops(logits, s, uniform);
  return sample_with_kernel(logits, s, uniform);
}

int64_t decode_bucket(int64_t rows, int64_t max_rows) {
  if (rows <= 8) return std::min<int64_t>(8, max_rows);
  int64_t p = 8;  // the power of two with p < rows <= 2p
  while (2 * p < rows) p *= 2;
  const int64_t step = std::max<int64_t>(8, p / 4);
  return std::min(max_rows, (rows + step - 1) / step * step);
}

void validate_sampling(const SamplingConfig& s) {
  if (!(s.temperature >= 0)) throw UserError("rollout.temperature must be >= 0, got " + std::to_string(s.temperature));
  if (s.top_k < 0) throw UserError("rollout.top_k must be >= 0, got " + std::to_string(s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1))
    throw UserError("rollout.top_p must be in (0, 1], got " + std::to_string(s.top_p));
  if (s.max_new_tokens < 1)
    throw UserError("rollout.max_new_tokens must be >= 1, got " + std::to_string(s.max_new_tokens));
}

PromptGroups consecutive_prompt_groups(const std::vector<std::vector<int32_t>>& prompts) {
  PromptGroups g;
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    if (b == 0 || prompts[b] != prompts[b - 1]) g.first_rows.push_back(int64_t(b));
    g.of_row.push_back(int64_t(g.first_rows.size()) - 1);
  }
  return g;
}

std::pair<torch::Tensor, torch::Tensor> pad_prompts(const std::vector<std::vector<int32_t>>& prompts, int64_t P,
                                                    int32_t pad_id, const torch::Device& device) {
  const int64_t B = int64_t(prompts.size());
  std::vector<int64_t> ids(std::size_t(B * P), int64_t(pad_id));
  std::vector<uint8_t> real(std::size_t(B * P), 0);
  bool padded = false;
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[std::size_t(b)];
    const int64_t start = P - int64_t(p.size());
    padded = padded || start > 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      ids[std::size_t(b * P + start) + i] = p[i];
      real[std::size_t(b * P + start) + i] = 1;
    }
  }
  const torch::Tensor tokens = torch::from_blob(ids.data(), {B, P}, torch::kLong).to(device, false, true);
  if (!padded) return {tokens, {}};
  return {tokens, torch::from_blob(real.data(), {B, P}, torch::kUInt8).to(device, torch::kBool, false, true)};
}

torch::Tensor sampling_uniforms(uint64_t seed, int64_t step, const std::vector<int64_t>& global_rows, int64_t tokens,
                                const torch::Device& device) {
  torch::Tensor u = torch::empty({int64_t(global_rows.size()), tokens}, torch::kFloat32);  // (rows, tokens)
  float* out = u.data_ptr<float>();
  for (std::size_t i = 0; i < global_rows.size(); ++i)
    for (int64_t t = 0; t < tokens; ++t)
      *out++ = sampling_uniform(seed, uint64_t(step), uint64_t(global_rows[i]), uint64_t(t));
  return u.to(device);
}

DecodeMode resolve_decode_mode(DecodeMode mode, const torch::Device& device, bool use_cache) {
  if (mode == DecodeMode::graphs && !device.is_cuda())
    throw UserError("rollout.decode: graphs needs a CUDA device, the model is on " + device.str() +
                    " (use auto, dynamic or fixed)");
  if (mode == DecodeMode::graphs && !decode_graphs_compiled())
    throw UserError(
        "rollout.decode: graphs needs a build with CUDA kernels (UNSTUCK_CUDA=ON); use auto, dynamic "
        "or fixed");
  if (!use_cache) return DecodeMode::dynamic;  // the recompute path has no cache to fix
  if (mode == DecodeMode::automatic)
    return device.is_cuda() && decode_graphs_compiled() ? DecodeMode::graphs : DecodeMode::dynamic;
  return mode;
}

namespace {

// The longest prompt's length, after the prompts and the uniforms are checked against the model.
int64_t checked_prompt_length(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                              const GenerateOptions& o) {
  int64_t P = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw UserError("generate: empty prompt");
    P = std::max<int64_t>(P, int64_t(p.size()));
  }
  const int64_t B = int64_t(prompts.size()), N = o.sampling.max_new_tokens;
  if (o.uniforms.defined() && (o.uniforms.dim() != 2 || o.uniforms.size(0) != B || o.uniforms.size(1) < N))
    throw std::invalid_argument("generate: uniforms must be (prompts, max_new_tokens)");
  if (P + N > model.config().max_seq_len)
    throw UserError("generate: prompt (" + std::to_string(P) + " tokens) + max_new_tokens (" + std::to_string(N) +
                    ") exceed model.max_seq_len (" + std::to_string(model.config().max_seq_len) + ")");
  if (o.stop_check_every < 0) throw std::invalid_argument("generate: stop_check_every must be >= 0");
  return P;
}

// (B, N) uniforms, undefined when greedy; without given ones, rows 0..B-1 at step 0 under a seed from
// the generator.
torch::Tensor step_uniforms(const GenerateOptions& o, at::Generator gen, int64_t B, const torch::Device& device) {
  const int64_t N = o.sampling.max_new_tokens;
  if (o.sampling.temperature <= 0) return {};
  if (o.uniforms.defined()) return o.uniforms.narrow(1, 0, N).to(device, torch::kFloat32);
  const auto seed = at::randint(std::numeric_limits<int64_t>::max(), {1}, gen, torch::kLong).item<int64_t>();
  std::vector<int64_t> rows(static_cast<std::size_t>(B));
  for (int64_t b = 0; b < B; ++b) rows[std::size_t(b)] = b;
  return sampling_uniforms(uint64_t(seed), 0, rows, N, device);
}

std::unique_ptr<Decoder> make_decoder(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                      const torch::Tensor& prompt, const torch::Tensor& valid,
                                      const GenerateOptions& o) {
  const int64_t N = o.sampling.max_new_tokens;
  const DecodeMode mode = resolve_decode_mode(o.sampling.decode, prompt.device(), o.use_cache);
  if (mode == DecodeMode::fixed || mode == DecodeMode::graphs)
    return std::make_unique<FixedDecoder>(model, prompts, prompt, valid, N, o.share_prompts,
                                          mode == DecodeMode::graphs);
  if (!o.use_cache) return std::make_unique<RecomputeDecoder>(model, prompt, valid, N, o.pad_id);
  return std::make_unique<CachedDecoder>(model, prompts, prompt, valid, N, o.share_prompts);
}

// Each row's completion, read once from the (B, N) tokens and log-probs: up to and including its
// first stop token.
std::vector<Completion> read_completions(const torch::Tensor& tokens, const torch::Tensor& logp,
                                         const std::vector<int64_t>& stop_list) {
  const torch::Tensor tokens_host = tokens.cpu(), logp_host = logp.cpu();
  const auto tok = tokens_host.accessor<int64_t, 2>();
  const auto lp = logp_host.accessor<float, 2>();
  std::vector<Completion> out(static_cast<std::size_t>(tokens.size(0)));
  for (int64_t b = 0; b < tokens.size(0); ++b) {
    Completion& c = out[std::size_t(b)];
    for (int64_t t = 0; t < tokens.size(1); ++t) {
      c.tokens.push_back(int32_t(tok[b][t]));
      c.logprobs.push_back(lp[b][t]);
      if (std::find(stop_list.begin(), stop_list.end(), tok[b][t]) != stop_list.end()) {
        c.finish = FinishReason::eos;
        break;
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Completion> generate(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& o, at::Generator gen) {
  validate_sampling(o.sampling);
  torch::NoGradGuard no_grad;
  const int64_t B = int64_t(prompts.size());
  if (B == 0) return {};
  const int64_t P = checked_prompt_length(model, prompts, o), N = o.sampling.max_new_tokens;
  const torch::Device device = model.flat_weights().device();
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  const torch::Tensor uniforms = step_uniforms(o, gen, B, device);
  const auto [prompt, prompt_valid] = pad_prompts(prompts, P, o.pad_id, device);  // (B, P), (B, P) or undefined
  const std::unique_ptr<Decoder> decoder = make_decoder(model, prompts, prompt, prompt_valid, o);
  // Results of every row, written by tensor ops: (B, N) tokens and log-probs.
  const torch::Tensor gen_tokens = torch::full({B, N}, int64_t(o.pad_id), long_opts);
  const torch::Tensor gen_logp = torch::zeros({B, N}, long_opts.dtype(torch::kFloat32));
  torch::Tensor active = torch::arange(B, long_opts);  // (A) original row of each decode-batch row
  const std::vector<int64_t> stop_list(o.stop_ids.begin(), o.stop_ids.end());
  const torch::Tensor stop = torch::tensor(stop_list, torch::kLong).to(device);
  const int64_t check_every = o.stop_check_every > 0 ? o.stop_check_every : (device.is_cuda() ? 8 : 1);
  int64_t A = B;
  // Rows that sampled a stop token but are still in the decode batch (they leave when compacting).
  torch::Tensor done = torch::zeros({A}, long_opts.dtype(torch::kBool));
  GenerateProgress progress{0, N, B, 0, 0};
  torch::Tensor next, logp;  // (A) the tokens sampled at step t and their log-probs
  for (int64_t t = 0; t < N; ++t) {
    const torch::Tensor u = uniforms.defined() ? uniforms.select(1, t).index_select(0, active) : torch::Tensor();
    std::tie(next, logp) = decoder->step(t, next, u, A, o.sampling);
    // Rows already finished keep sampling until dropped; what they sample after their stop is never read.
    gen_tokens.select(1, t).index_copy_(0, active, next);
    gen_logp.select(1, t).index_copy_(0, active, logp);
    if (o.progress) {
      progress.tokens_done = t + 1;
      progress.sampled += A;
      o.progress(progress);
    }
    if (t + 1 == N || stop_list.empty()) continue;
    done = done | (stop_list.size() == 1 ? next.eq(stop_list[0]) : torch::isin(next, stop));
    if ((t + 1) % check_every != 0) continue;
    const int64_t finished = done.sum().item<int64_t>();  // the decode loop's one host read
    progress.finished = B - A + finished;
    if (finished == A) break;
    if (o.drop_finished && finished > 0 && decoder->compact(finished, A, B)) {
      const torch::Tensor keep = done.logical_not().nonzero().squeeze(1);  // (A') ascending
      active = active.index_select(0, keep);
      next = next.index_select(0, keep);
      decoder->keep_rows(keep);
      A -= finished;
      done = torch::zeros({A}, done.options());
    }
  }
  return read_completions(gen_tokens, gen_logp, stop_list);
}

}  // namespace unstuck::rollout
