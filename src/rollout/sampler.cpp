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
#include <numeric>
#include <string>
#include <tuple>
#include <unordered_map>

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
  // Each row's context after the call (its prompt `prompts[i]` and completion `out[i]` but the last
  // token) for GenerateOptions::contexts, named by `ids`; none without a cache.
  virtual KeptContexts kept_contexts(const std::vector<std::vector<int32_t>>& /*prompts*/,
                                     const std::vector<Completion>& /*out*/, const std::vector<int64_t>& /*ids*/) {
    return {};
  }

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

// Where a call's prompts start (GenerateOptions::contexts): per prompt, the row of the kept cache
// whose context it extends (-1: none) and the tokens after that context, which the call computes.
struct Continuation {
  std::vector<int64_t> from;
  std::vector<std::vector<int32_t>> tails;
  bool any = false;
};

Continuation continuation_of(const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o) {
  Continuation c;
  c.from.assign(prompts.size(), -1);
  if (!o.row_ids.empty() && o.row_ids.size() != prompts.size())
    throw std::invalid_argument("generate: row_ids must name every prompt's row");
  if (!o.contexts || !o.use_cache || o.contexts->ids.empty()) return c;
  const KeptContexts& kept = *o.contexts;
  std::unordered_map<int64_t, int64_t> row_of;  // row id -> its row of the kept cache
  for (std::size_t j = 0; j < kept.ids.size(); ++j) row_of[kept.ids[j]] = int64_t(j);
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const auto it = row_of.find(o.row_ids.empty() ? int64_t(b) : o.row_ids[b]);
    if (it == row_of.end()) continue;
    const std::vector<int32_t>& ctx = kept.tokens[std::size_t(it->second)];
    if (ctx.size() < prompts[b].size() && std::equal(ctx.begin(), ctx.end(), prompts[b].begin())) {
      c.from[b] = it->second;
      c.any = true;
    }
  }
  if (!c.any) return c;
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const std::size_t done = c.from[b] < 0 ? 0 : kept.tokens[std::size_t(c.from[b])].size();
    c.tails.emplace_back(prompts[b].begin() + std::ptrdiff_t(done), prompts[b].end());
  }
  return c;
}

// DecodeMode dynamic: one cached forward of the previous tokens per step, over a cache that
// shrinks with the batch. The prefill runs once per distinct prompt when rows share one (a GRPO
// group), its keys and values copied to the rows; rows that continue kept contexts copy them and
// prefill only their tails. With `contexts` every row's context is kept to the end: a row leaving
// the batch moves behind the decoding ones in the same buffers instead of being dropped.
class CachedDecoder : public Decoder {
 public:
  CachedDecoder(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                const torch::Tensor& prompt, const torch::Tensor& valid, int64_t N, bool share_prompts,
                const Continuation& cont, KeptContexts* contexts)
      : model_(model),
        cache_(model.new_slots_cache(prompt.size(0), (cont.any ? contexts->cache.length : 0) + prompt.size(1) + N)),
        keep_all_(contexts != nullptr) {
    if (keep_all_) {
      cache_.reserve(cache_.capacity);  // the buffers never move: the view of the decoding rows stays valid
      whole_ = cache_;
      rows_.resize(std::size_t(prompt.size(0)));
      std::iota(rows_.begin(), rows_.end(), int64_t(0));
    }
    if (cont.any) {
      continue_from(cont, *contexts, prompt, valid);
    } else {
      prefill(prompts, prompt, valid, share_prompts);
    }
    prefill_length_ = cache_.length;
  }
  void keep_rows(const torch::Tensor& keep) override {
    if (!keep_all_) {
      cache_.keep_rows(keep);
      return;
    }
    sync_whole();
    whole_->move_rows_to_front(reorder(keep));
    cache_ = whole_->first_rows(keep.size(0));
  }
  KeptContexts kept_contexts(const std::vector<std::vector<int32_t>>& prompts, const std::vector<Completion>& out,
                             const std::vector<int64_t>& ids) override;

 protected:
  std::pair<torch::Tensor, torch::Tensor> next(int64_t, const torch::Tensor& prev, const torch::Tensor& u, int64_t,
                                               const SamplingConfig& s) override {
    return sample_logits(model_.forward_cached(prev.unsqueeze(1), cache_, {}, /*last_only=*/true).select(1, 0), s, u);
  }
  // With every context kept: the buffers' row order after the decoding rows `keep` (ascending, of
  // the first `active_`) stay: they first, then the other decoding rows, then those that left before.
  torch::Tensor reorder(const torch::Tensor& keep) {
    const torch::Tensor kept = keep.cpu();
    std::vector<int64_t> order(kept.data_ptr<int64_t>(), kept.data_ptr<int64_t>() + kept.numel());
    std::vector<bool> staying(std::size_t(active_), false);
    for (int64_t r : order) staying[std::size_t(r)] = true;
    for (int64_t r = 0; r < int64_t(rows_.size()); ++r)
      if (r >= active_ || !staying[std::size_t(r)]) order.push_back(r);
    std::vector<int64_t> rows(rows_.size());
    for (std::size_t j = 0; j < order.size(); ++j) rows[j] = rows_[std::size_t(order[j])];
    rows_ = std::move(rows);
    active_ = kept.numel();
    return torch::tensor(order, torch::kLong).to(keep.device());
  }

  const model::LlamaModel& model_;
  model::KVCache cache_;
  bool keep_all_;
  std::vector<int64_t> rows_;  // with every context kept: the call's row each buffer row holds
  int64_t active_ = 0;         // of them, the decoding rows (the first ones)
  int64_t prefill_length_ = 0;

 private:
  void prefill(const std::vector<std::vector<int32_t>>& prompts, const torch::Tensor& prompt,
               const torch::Tensor& valid, bool share_prompts) {
    active_ = prompt.size(0);
    const PromptGroups groups = share_prompts ? consecutive_prompt_groups(prompts) : PromptGroups{};
    if (!share_prompts || int64_t(groups.first_rows.size()) == prompt.size(0)) {
      first_ = model_.forward_cached(prompt, cache_, valid, /*last_only=*/true).select(1, 0);
      return;
    }
    const torch::Tensor firsts = torch::tensor(groups.first_rows, torch::kLong).to(prompt.device());
    const torch::Tensor rows = torch::tensor(groups.of_row, torch::kLong).to(prompt.device());
    model::KVCache shared = model_.new_cache(int64_t(groups.first_rows.size()), prompt.size(1));
    first_ = model_
                 .forward_cached(prompt.index_select(0, firsts), shared,
                                 valid.defined() ? valid.index_select(0, firsts) : torch::Tensor(), /*last_only=*/true)
                 .select(1, 0)
                 .index_select(0, rows);
    cache_.copy_rows_from(shared, rows);
  }
  // Rows continuing kept contexts start from copies of them (the kept cache is released), the others
  // empty; then every row's tail is prefilled.
  void continue_from(const Continuation& cont, KeptContexts& kept, const torch::Tensor& tail,
                     const torch::Tensor& valid) {
    active_ = tail.size(0);
    std::vector<int64_t> source, fresh;
    for (std::size_t b = 0; b < cont.from.size(); ++b) {
      source.push_back(std::max<int64_t>(cont.from[b], 0));
      if (cont.from[b] < 0) fresh.push_back(int64_t(b));
    }
    cache_.copy_rows_from(kept.cache, torch::tensor(source, torch::kLong).to(tail.device()));
    if (!fresh.empty()) {
      const torch::Tensor rows = torch::tensor(fresh, torch::kLong).to(tail.device());
      cache_.key_valid.index_fill_(0, rows, false);
      cache_.next_position.index_fill_(0, rows, 0);
    }
    cache_.has_holes = true;  // the kept rows' unfilled tails, the fresh rows' slots
    kept.cache = model::KVCache();
    first_ = model_.forward_cached(tail, cache_, valid, /*last_only=*/true).select(1, 0);
  }
  // The whole buffers' host-side fields brought up to the decoding rows' view.
  void sync_whole() {
    whole_->length = cache_.length;
    whole_->has_holes = cache_.has_holes;
    whole_->next_position.narrow(0, 0, cache_.batch()).copy_(cache_.next_position);
  }

  std::optional<model::KVCache> whole_;  // with every context kept: all rows' buffers (cache_: its first rows)
};

KeptContexts CachedDecoder::kept_contexts(const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<Completion>& out, const std::vector<int64_t>& ids) {
  if (whole_) sync_whole();
  model::KVCache c = whole_ ? *whole_ : cache_;  // the same buffers
  c.slot = torch::Tensor();
  c.attend_slots = 0;
  const int64_t B = c.batch(), L = c.length;
  // Row j keeps its filled slots before its completion's last token: the prompt's, then one per fed token.
  const torch::Tensor filled = c.key_valid.narrow(1, 0, L).cpu();
  const auto valid = filled.accessor<bool, 2>();
  std::vector<std::vector<int64_t>> slots(static_cast<std::size_t>(B));
  int64_t longest = 0;
  KeptContexts kept;
  for (int64_t j = 0; j < B; ++j) {
    const std::size_t i = std::size_t(rows_[std::size_t(j)]);
    const int64_t n = int64_t(out[i].tokens.size());
    for (int64_t t = 0; t < std::min(L, prefill_length_ + n - 1); ++t)
      if (valid[j][t]) slots[std::size_t(j)].push_back(t);
    const int64_t count = int64_t(slots[std::size_t(j)].size());
    if (count != int64_t(prompts[i].size()) + n - 1)
      throw std::logic_error("generate: row " + std::to_string(i) + "'s cache holds " + std::to_string(count) +
                             " tokens of its context, not " + std::to_string(prompts[i].size() + std::size_t(n) - 1));
    longest = std::max(longest, count);
    kept.ids.push_back(ids[i]);
    kept.tokens.push_back(prompts[i]);
    kept.tokens.back().insert(kept.tokens.back().end(), out[i].tokens.begin(), out[i].tokens.end() - 1);
  }
  std::vector<int64_t> index(std::size_t(B * longest), 0), counts;
  std::vector<uint8_t> real(std::size_t(B * longest), 0);
  for (int64_t j = 0; j < B; ++j) {
    const std::vector<int64_t>& s = slots[std::size_t(j)];
    std::copy(s.begin(), s.end(), index.begin() + std::ptrdiff_t(j * longest));
    std::fill_n(real.begin() + std::ptrdiff_t(j * longest), s.size(), uint8_t(1));
    counts.push_back(int64_t(s.size()));
  }
  const torch::Device device = c.key_valid.device();
  const torch::Tensor at = torch::from_blob(index.data(), {B, longest}, torch::kLong).to(device, false, true);
  // Each layer's buffers (B, G, slots, hd) give way to their kept slots, in order: (B, G, longest, hd).
  for (std::vector<torch::Tensor>* kv : {&c.k, &c.v})
    for (torch::Tensor& t : *kv)
      t = t.narrow(2, 0, L).gather(2, at.view({B, 1, longest, 1}).expand({B, t.size(1), longest, t.size(3)}));
  c.key_position = c.key_position.narrow(1, 0, L).gather(1, at);
  c.key_valid = torch::from_blob(real.data(), {B, longest}, torch::kUInt8).to(device, torch::kBool, false, true);
  c.next_position = torch::tensor(counts, torch::kLong).to(device);
  c.capacity = longest;
  c.has_holes = *std::min_element(counts.begin(), counts.end()) < longest;
  c.length = longest;
  kept.cache = std::move(c);
  return kept;
}

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
               const torch::Tensor& prompt, const torch::Tensor& valid, int64_t N, bool share_prompts,
               const Continuation& cont, KeptContexts* contexts, bool graphs)
      : CachedDecoder(model, prompts, prompt, valid, N, share_prompts, cont, contexts),
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
  // With every context kept, the rows that leave stay behind the decoding ones (stale steps may
  // write past their contexts, which kept_contexts() does not read).
  void keep_rows(const torch::Tensor& keep) override { cache_.move_rows_to_front(keep_all_ ? reorder(keep) : keep); }

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

// Checks the prompts, the row limits and the uniforms against the model: each row's prompt + its
// limit within model.max_seq_len.
void check_prompts(const model::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                   const GenerateOptions& o) {
  int64_t P = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw UserError("generate: empty prompt");
    P = std::max<int64_t>(P, int64_t(p.size()));
  }
  const int64_t B = int64_t(prompts.size()), N = o.sampling.max_new_tokens;
  if (o.uniforms.defined() && (o.uniforms.dim() != 2 || o.uniforms.size(0) != B || o.uniforms.size(1) < N))
    throw std::invalid_argument("generate: uniforms must be (prompts, max_new_tokens)");
  if (!o.row_max_new.empty() && int64_t(o.row_max_new.size()) != B)
    throw std::invalid_argument("generate: row_max_new must hold one limit per prompt");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = o.row_max_new.empty() ? N : o.row_max_new[std::size_t(b)];
    if (n < 1 || n > N) throw std::invalid_argument("generate: row_max_new must be in [1, max_new_tokens]");
    // Without the cache every step runs over the longest prompt's sequence.
    const int64_t p = o.row_max_new.empty() || !o.use_cache ? P : int64_t(prompts[std::size_t(b)].size());
    if (p + n > model.config().max_seq_len)
      throw UserError("generate: prompt (" + std::to_string(p) + " tokens) + max_new_tokens (" + std::to_string(n) +
                      ") exceed model.max_seq_len (" + std::to_string(model.config().max_seq_len) + ")");
  }
  if (o.stop_check_every < 0) throw std::invalid_argument("generate: stop_check_every must be >= 0");
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
                                      const torch::Tensor& prompt, const torch::Tensor& valid, const GenerateOptions& o,
                                      const Continuation& cont) {
  const int64_t N = o.sampling.max_new_tokens;
  const DecodeMode mode = resolve_decode_mode(o.sampling.decode, prompt.device(), o.use_cache);
  // Rows continuing kept contexts have different ones: no prompt is shared.
  const bool share = o.share_prompts && !cont.any;
  KeptContexts* contexts = o.use_cache ? o.contexts.get() : nullptr;
  if (mode == DecodeMode::fixed || mode == DecodeMode::graphs)
    return std::make_unique<FixedDecoder>(model, prompts, prompt, valid, N, share, cont, contexts,
                                          mode == DecodeMode::graphs);
  if (!o.use_cache) return std::make_unique<RecomputeDecoder>(model, prompt, valid, N, o.pad_id);
  return std::make_unique<CachedDecoder>(model, prompts, prompt, valid, N, share, cont, contexts);
}

// Each row's completion, read once from the (B, N) tokens and log-probs: up to and including its
// first stop token, at most its limit (GenerateOptions::row_max_new; empty: all N).
std::vector<Completion> read_completions(const torch::Tensor& tokens, const torch::Tensor& logp,
                                         const std::vector<int64_t>& stop_list, const std::vector<int64_t>& limits) {
  const torch::Tensor tokens_host = tokens.cpu(), logp_host = logp.cpu();
  const auto tok = tokens_host.accessor<int64_t, 2>();
  const auto lp = logp_host.accessor<float, 2>();
  std::vector<Completion> out(static_cast<std::size_t>(tokens.size(0)));
  for (int64_t b = 0; b < tokens.size(0); ++b) {
    Completion& c = out[std::size_t(b)];
    const int64_t n = limits.empty() ? tokens.size(1) : limits[std::size_t(b)];
    for (int64_t t = 0; t < n; ++t) {
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
  const int64_t N = o.sampling.max_new_tokens;
  check_prompts(model, prompts, o);
  const torch::Device device = model.flat_weights().device();
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  const torch::Tensor uniforms = step_uniforms(o, gen, B, device);
  // What the call computes of each prompt: all of it, or its tail after a kept context.
  const Continuation cont = continuation_of(prompts, o);
  const std::vector<std::vector<int32_t>>& fresh = cont.any ? cont.tails : prompts;
  int64_t P = 0;
  for (const auto& p : fresh) P = std::max<int64_t>(P, int64_t(p.size()));
  const auto [prompt, prompt_valid] = pad_prompts(fresh, P, o.pad_id, device);  // (B, P), (B, P) or undefined
  const std::unique_ptr<Decoder> decoder = make_decoder(model, fresh, prompt, prompt_valid, o, cont);
  // Rows that stop at their own limit (row_max_new) before max_new_tokens.
  const torch::Tensor row_limit =
      o.row_max_new.empty() ? torch::Tensor() : torch::tensor(o.row_max_new, torch::kLong).to(device);
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
    if (t + 1 == N || (stop_list.empty() && !row_limit.defined())) continue;
    if (!stop_list.empty()) done = done | (stop_list.size() == 1 ? next.eq(stop_list[0]) : torch::isin(next, stop));
    if (row_limit.defined()) done = done | row_limit.index_select(0, active).le(t + 1);
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
  std::vector<Completion> out = read_completions(gen_tokens, gen_logp, stop_list, o.row_max_new);
  if (o.contexts && o.use_cache) {
    std::vector<int64_t> ids = o.row_ids;
    for (int64_t b = int64_t(ids.size()); b < B; ++b) ids.push_back(b);
    *o.contexts = decoder->kept_contexts(prompts, out, ids);
    for (const auto& p : fresh) o.contexts->computed.push_back(int64_t(p.size()));
  }
  return out;
}

}  // namespace unstuck::rollout
