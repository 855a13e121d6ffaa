// GrpoTrainer's update phase: the rollout batch on the device, the measurement before the update (policy,
// reference, entropy), and the clipped policy-gradient passes in row chunks with their optimizer steps.
#include "train/grpo_trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "unstuck/algo/advantages.h"
#include "unstuck/algo/dynamic_sampling.h"
#include "unstuck/algo/reward_shaping.h"
#include "unstuck/algo/token_logprobs.h"
#include "unstuck/common/error.h"
#include "unstuck/common/memory_usage.h"
#include "unstuck/common/simd.h"
#include "unstuck/config/config.h"
#include "unstuck/dist/data_parallel.h"
#include "unstuck/precision/philox.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/config/lr_schedule.h"
#include "train/grpo_internal.h"

namespace unstuck::train {
namespace {

// A row chunk's measurements (n, width) padded with zeros to the batch's T columns (the positions
// past every row's completion, masked wherever they are read).
Measurement full_width(const Measurement& m, int64_t T) {
  const auto pad = [&](const torch::Tensor& t) {
    return !t.defined() || t.size(1) == T ? t : torch::constant_pad_nd(t, {0, T - t.size(1)});
  };
  return {pad(m.logp), pad(m.entropy), pad(m.kl_exact), pad(m.ref_logp)};
}

// Row chunks' measurements joined along rows; the reference's stay undefined where the chunks
// have none.
Measurement cat_rows(const std::vector<Measurement>& parts) {
  const auto cat = [&](torch::Tensor Measurement::*field) {
    std::vector<torch::Tensor> defined;
    for (const Measurement& p : parts)
      if ((p.*field).defined()) defined.push_back(p.*field);
    return defined.empty() ? torch::Tensor() : torch::cat(defined);
  };
  return {cat(&Measurement::logp), cat(&Measurement::entropy), cat(&Measurement::kl_exact),
          cat(&Measurement::ref_logp)};
}

}  // namespace

torch::Tensor GrpoTrainer::reward_kl(const RolloutBatch& batch) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  const int64_t T = batch.mask.size(1);
  const torch::Tensor positions = torch::arange(T, batch.lengths.options()).unsqueeze(0);  // (1, T)
  const auto chunks = row_chunks(0, batch.rows(), cfg_.grpo.logprob_chunk_rows);
  for (const auto& [b, e] : chunks) {
    progress_.chunk("reward KL", int64_t(parts.size()) + 1, int64_t(chunks.size()));
    const torch::Tensor rows = torch::arange(b, e, torch::TensorOptions(torch::kLong).device(device_));
    const int64_t w = batch.width(b, e);
    const torch::Tensor ref_logp = algo::head_log_probs(completion_head(*reference_, batch, b, e), {},
                                                        batch.targets(rows, w), cfg_.grpo.logprob_chunk_tokens)
                                       .logp;
    const torch::Tensor sampled =
        positions.narrow(1, 0, w) < batch.lengths.index_select(0, rows).unsqueeze(1);  // (n, w)
    parts.push_back(algo::sequence_kl(batch.old_logp.index_select(0, rows).narrow(1, 0, w), ref_logp, sampled,
                                      cfg_.grpo.kl_estimator));
  }
  return cfg_.grpo.kl_coef * torch::cat(parts);
}

std::vector<float> GrpoTrainer::shaped_rewards(const RolloutBatch& batch, Scores* sc) const {
  std::vector<float> rewards = sc->rewards;
  if (cfg_.grpo.kl_in != algo::KlIn::reward) return rewards;
  const torch::Tensor penalty = reward_kl(batch).to(torch::kDouble).cpu();
  const double* p = penalty.data_ptr<double>();
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    rewards[i] = float(double(rewards[i]) - p[i]);
    sc->kl_penalty += p[i];
  }
  return rewards;
}

RolloutBatch GrpoTrainer::make_batch(const Rollouts& ro) const {
  const auto& prompts = ro.prompts;
  const auto& outs = ro.completions;
  const int64_t N = int64_t(prompts.size());
  int64_t P = 0, T = 1;
  for (const auto& p : prompts) P = std::max<int64_t>(P, int64_t(p.size()));
  for (const auto& c : outs) T = std::max<int64_t>(T, int64_t(c.tokens.size()));
  // Filled on the host (the completions are host vectors), then one copy each to the device.
  RolloutBatch b;
  b.prompt_len = P;
  b.tokens = torch::full({N, P + T}, int64_t(ctx_.tokenizer.pad_id()), torch::kLong);
  b.mask = torch::zeros({N, T});
  b.old_logp = torch::zeros({N, T});
  b.lengths = torch::zeros({N}, torch::kLong);
  b.lengths_host.resize(std::size_t(N));
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto msk = b.mask.accessor<float, 2>();
  auto olp = b.old_logp.accessor<float, 2>();
  auto len = b.lengths.accessor<int64_t, 1>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t start = P - int64_t(prompts[n].size());
    for (std::size_t i = 0; i < prompts[n].size(); ++i) tok[n][start + int64_t(i)] = prompts[n][i];
    // grpo.overlong: filter: a truncated completion takes no part in the loss.
    // grpo.filter_groups: a group that only fills the batch neither.
    const bool in_loss =
        (cfg_.grpo.overlong != algo::Overlong::filter || outs[n].finish != rollout::FinishReason::length) &&
        (ro.in_loss.empty() || ro.in_loss[std::size_t(n)]);
    len[n] = int64_t(outs[n].tokens.size());
    b.lengths_host[std::size_t(n)] = len[n];
    for (std::size_t t = 0; t < outs[n].tokens.size(); ++t) {
      tok[n][P + int64_t(t)] = outs[n].tokens[t];
      // A tool's result is context, never the policy's: out of the loss, the KL and the entropy.
      const bool policy = outs[n].from_tool.empty() || outs[n].from_tool[t] == 0;
      msk[n][int64_t(t)] = in_loss && policy ? 1.0f : 0.0f;
      olp[n][int64_t(t)] = outs[n].logprobs[t];
    }
  }
  rollout::PromptGroups groups = rollout::consecutive_prompt_groups(prompts);
  std::vector<std::vector<int32_t>> distinct;
  for (int64_t n : groups.first_rows) distinct.push_back(prompts[std::size_t(n)]);
  std::tie(b.prompts, b.prompt_valid) = rollout::pad_prompts(distinct, P, ctx_.tokenizer.pad_id(), device_);
  b.prompt_of_row_host = std::move(groups.of_row);
  b.prompt_of_row = torch::tensor(b.prompt_of_row_host, torch::kLong).to(device_);
  b.tokens = b.tokens.to(device_);
  b.mask = b.mask.to(device_);
  b.old_logp = b.old_logp.to(device_);
  b.lengths = b.lengths.to(device_);
  b.global_rows_host = rows_of_[std::size_t(comm_.rank())];
  b.global_rows = torch::tensor(b.global_rows_host, torch::kLong).to(device_);
  return b;
}

algo::HeadInput GrpoTrainer::completion_head(const model::LlamaModel& m, const RolloutBatch& b, int64_t begin,
                                             int64_t end, std::optional<uint64_t> dropout_key) const {
  // The rows' distinct prompts are a contiguous range (consecutive rows share them).
  const int64_t first = b.prompt_of_row_host[std::size_t(begin)];
  const int64_t distinct = b.prompt_of_row_host[std::size_t(end - 1)] - first + 1;
  const model::SharedPrompts sp{b.prompts.narrow(0, first, distinct),
                                b.prompt_valid.defined() ? b.prompt_valid.narrow(0, first, distinct) : torch::Tensor(),
                                b.prompt_of_row.narrow(0, begin, end - begin) - first};
  const int64_t P = b.prompt_len;
  const torch::Tensor completions = b.tokens.narrow(0, begin, end - begin).narrow(1, P, b.width(begin, end));
  if (!dropout_key) return {m.forward_completions_hidden(sp, completions), m.head_weight()};  // (n, width, D), (V, D)
  // lora.dropout: rows keyed by their index in the step's batch, prompts by the group's index.
  const int64_t G = cfg_.grpo.group_size;
  std::vector<int64_t> prompt_ids(static_cast<std::size_t>(distinct));
  for (int64_t r = end - 1; r >= begin; --r)  // the first row of each prompt, ascending rows
    prompt_ids[std::size_t(b.prompt_of_row_host[std::size_t(r)] - first)] = b.global_rows_host[std::size_t(r)] / G;
  const model::DropoutRows rows{*dropout_key, b.global_rows.narrow(0, begin, end - begin),
                                torch::tensor(prompt_ids, torch::kLong).to(device_)};
  return {m.forward_completions_hidden(sp, completions, &rows), m.head_weight()};
}

Measurement GrpoTrainer::measure(const RolloutBatch& batch, bool with_ref) const {
  torch::NoGradGuard no_grad;
  std::vector<Measurement> parts;
  const auto chunks = row_chunks(0, batch.rows(), cfg_.grpo.logprob_chunk_rows);
  for (const auto& [b, e] : chunks) {
    progress_.chunk("measure", int64_t(parts.size()) + 1, int64_t(chunks.size()));
    const torch::Tensor rows = torch::arange(b, e, torch::TensorOptions(torch::kLong).device(device_));
    const algo::HeadInput ref = with_ref ? completion_head(*reference_, batch, b, e) : algo::HeadInput{};
    parts.push_back(
        full_width(algo::head_log_probs(completion_head(weights_.model(), batch, b, e), ref,
                                        batch.targets(rows, batch.width(b, e)), cfg_.grpo.logprob_chunk_tokens)
                       .stats,
                   batch.mask.size(1)));
  }
  return cat_rows(parts);
}

GrpoTrainer::UpdateStats GrpoTrainer::update(int64_t step, const RolloutBatch& batch, const torch::Tensor& advantages,
                                             bool with_ref, std::optional<Measurement>* measured) {
  const auto& g = cfg_.grpo;
  const int64_t N = batch.rows();
  UpdatePass pass;
  pass.step = step;
  pass.with_ref = with_ref;
  pass.measure_here = !measured->has_value();
  pass.need_ref_logits = loss_opts_.kl_coef > 0 || (pass.measure_here && with_ref);
  pass.measured = measured;
  std::vector<Measurement> measured_parts;
  pass.measured_parts = &measured_parts;
  UpdateStats up;
  const int64_t passes = g.ppo_epochs * g.minibatches;
  int64_t updates = 0;
  for (int64_t epoch = 0; epoch < g.ppo_epochs; ++epoch)
    for (int64_t mb = 0; mb < g.minibatches; ++mb) {
      const int64_t begin = N * mb / g.minibatches, end = N * (mb + 1) / g.minibatches;
      const auto chunks = row_chunks(begin, end, g.logprob_chunk_rows);
      pass.epoch = epoch;
      pass.mb_tokens = batch.mask.narrow(0, begin, end - begin).sum().item<double>();
      pass.several_chunks = chunks.size() > 1;
      // The loss is normalized by the whole minibatch's tokens (or sequences) across ranks and chunks.
      double counts[2] = {pass.mb_tokens, double(end - begin)};
      loss_opts_.normalizer = 0;
      if (comm_.world_size() > 1 || chunks.size() > 1) {
        if (comm_.world_size() > 1) comm_.all_reduce_sum(counts, 2);
        loss_opts_.normalizer =
            g.loss_aggregation == algo::LossAggregation::token_mean ? std::max(counts[0], 1.0) : counts[1];
      }
      ChunkSums sums;
      int64_t chunk_no = 0;
      for (const auto& [cb, ce] : chunks) {
        progress_.chunk("update", ++chunk_no, int64_t(chunks.size()), updates + 1, passes);
        sums += update_chunk(pass, batch, advantages, cb, ce);
      }
      progress_.optimizer(updates + 1, passes);
      optimizer_pass(step, sums, pass.mb_tokens, &up);
      ++updates;
    }
  up.grad_norm /= double(updates);
  up.update_ratio /= double(updates);
  if (pass.measure_here) *measured = cat_rows(measured_parts);
  return up;
}

GrpoTrainer::ChunkSums& GrpoTrainer::ChunkSums::operator+=(const ChunkSums& o) {
  clipped += o.clipped;
  clipped_low += o.clipped_low;
  clipped_high += o.clipped_high;
  dual_clipped += o.dual_clipped;
  forward_positions += o.forward_positions;
  completion_positions += o.completion_positions;
  completion_tokens += o.completion_tokens;
  return *this;
}

GrpoTrainer::ChunkSums GrpoTrainer::update_chunk(const UpdatePass& pass, const RolloutBatch& batch,
                                                 const torch::Tensor& advantages, int64_t cb, int64_t ce) {
  const auto& g = cfg_.grpo;
  ChunkSums sums;
  const torch::Tensor rows = torch::arange(cb, ce, torch::TensorOptions(torch::kLong).device(device_));
  const int64_t w = batch.width(cb, ce);                 // the chunk's longest completion: no padding past it
  const torch::Tensor targets = batch.targets(rows, w);  // (n, w)
  trace_memory("update: chunk start");
  const algo::HeadInput policy =
      completion_head(weights_.model(), batch, cb, ce, dropout_key(pass.step, pass.epoch));  // (n, T, D)
  sums.forward_positions = double(batch.forward_positions(cb, ce));
  sums.completion_positions = double((ce - cb) * w);
  for (int64_t r = cb; r < ce; ++r) sums.completion_tokens += double(batch.lengths_host[std::size_t(r)]);
  algo::HeadInput ref_in;
  if (pass.need_ref_logits) {
    torch::NoGradGuard no_grad;
    ref_in = completion_head(*reference_, batch, cb, ce);
  }
  // The head fused with the log-probs: no (n, T, V) logits; its weight gradient goes to the flat
  // gradient directly.
  const algo::HeadLogProbs head =
      algo::head_log_probs(policy, ref_in, targets, g.logprob_chunk_tokens, weights_.model().head_grad_sink());
  const torch::Tensor lp = head.logp;
  const torch::Tensor ent = g.entropy_coef > 0 ? head.entropy : torch::Tensor();
  const torch::Tensor ref = loss_opts_.kl_coef > 0 ? head.stats.ref_logp : torch::Tensor();
  if (pass.measure_here) {
    Measurement m = head.stats;
    if (!pass.with_ref) m.kl_exact = m.ref_logp = torch::Tensor();
    pass.measured_parts->push_back(full_width(m, batch.mask.size(1)));
  }
  trace_memory("update: log-probs and measurement");
  const torch::Tensor mask = batch.mask.index_select(0, rows).narrow(1, 0, w);
  // grpo.tis_cap: the ratio against the trainer's own log-probs before the update (this forward's,
  // detached, on one epoch of one minibatch), each token weighted by the truncated trainer / sampler
  // probability ratio.
  torch::Tensor old = batch.old_logp.index_select(0, rows).narrow(1, 0, w), tis;
  if (g.tis_cap > 0) {
    const torch::Tensor proximal =
        pass.measure_here ? lp.detach() : (*pass.measured)->logp.index_select(0, rows).narrow(1, 0, w);
    tis = algo::tis_weights(proximal, old, g.tis_cap);
    old = proximal;
  }
  const algo::PolicyLoss pl =
      algo::policy_loss(lp, old, advantages.index_select(0, rows), mask, ref, ent, loss_opts_, tis);
  (pl.loss * weights_.loss_scale()).backward();
  trace_memory("update: backward");
  weights_.accumulate_grads();
  const double chunk_tokens =
      pass.several_chunks ? std::max(mask.sum().item<double>(), 1.0) : std::max(pass.mb_tokens, 1.0);
  sums.clipped = pl.clip_frac * chunk_tokens;
  sums.clipped_low = pl.clip_frac_low * chunk_tokens;
  sums.clipped_high = pl.clip_frac_high * chunk_tokens;
  sums.dual_clipped = pl.dual_clip_frac * chunk_tokens;
  return sums;
}

void GrpoTrainer::optimizer_pass(int64_t step, const ChunkSums& sums, double mb_tokens, UpdateStats* up) {
  const auto& g = cfg_.grpo;
  up->lr = g.lr.lr_at(cfg_.optim.lr, weights_.optimizer_steps() + 1, total_opt_steps_);
  const auto t_opt = std::chrono::steady_clock::now();
  up->last = weights_.optimizer_step(cfg_.optim, up->lr);
  up->optimizer_seconds += seconds_since(t_opt);
  trace_memory("update: optimizer step");
  skipped_ += up->last.skipped;
  skip_guard_.record(step, up->last.skipped, up->last.loss_scale, up->lr);
  up->clipped.push_back(sums.clipped);
  up->clipped_low.push_back(sums.clipped_low);
  up->clipped_high.push_back(sums.clipped_high);
  up->dual_clipped.push_back(sums.dual_clipped);
  up->tokens.push_back(std::max(mb_tokens, 1.0));
  up->forward_positions += sums.forward_positions;
  up->completion_positions += sums.completion_positions;
  up->completion_tokens += sums.completion_tokens;
  up->grad_norm += up->last.grad_norm;
  up->loss_scale = up->last.loss_scale;
  up->update_ratio += std::sqrt(up->last.update_sumsq) / std::max(std::sqrt(up->last.weight_sumsq), 1e-30);
}

}  // namespace unstuck::train
