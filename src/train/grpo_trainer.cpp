// GrpoTrainer: the phases of one GRPO step. Every tensor of a step lives on the trainer's device;
// the host sees the completions (for the verifiers) and a handful of scalars per step (token
// counts per minibatch, the metric sums in one copy, the optimizer's statistics).
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
#include "unstuck/train/lr_schedule.h"

namespace unstuck::train {
namespace {

// Each named number's mean over the completions of every rank that have it. The ranks' key sets may
// differ (a function's dict keys), so the names travel first: each rank's, newline-joined, in a
// fixed buffer of kExtraNamesBytes (keys past it are left out, with a warning).
constexpr std::size_t kExtraNamesBytes = 4096;
std::map<std::string, double> extra_means(dist::Communicator& comm,
                                          const std::map<std::string, std::pair<double, double>>& local) {
  std::vector<std::string> keys;
  for (const auto& entry : local) keys.push_back(entry.first);
  if (comm.world_size() > 1) {
    std::string names;
    for (const std::string& k : keys) {
      if (names.size() + k.size() + 1 > kExtraNamesBytes) {
        spdlog::warn("reward metrics: more reward_extra/ and reward/ names than fit {} bytes; '{}' and later ones are not logged",
                     kExtraNamesBytes, k);
        break;
      }
      names += k + "\n";
    }
    names.resize(kExtraNamesBytes, '\0');
    std::string all(kExtraNamesBytes * std::size_t(comm.world_size()), '\0');
    comm.all_gather(names.data(), all.data(), kExtraNamesBytes, dist::DataType::u8);
    std::set<std::string> every;
    for (std::size_t at = 0; at < all.size();) {
      const std::size_t nl = all.find('\n', at);
      const std::size_t block_end = (at / kExtraNamesBytes + 1) * kExtraNamesBytes;
      if (all[at] == '\0' || nl == std::string::npos || nl >= block_end) {
        at = block_end;
        continue;
      }
      every.insert(all.substr(at, nl - at));
      at = nl + 1;
    }
    keys.assign(every.begin(), every.end());
  }
  std::vector<double> sums;
  for (const std::string& k : keys) {
    const auto it = local.find(k);
    sums.push_back(it == local.end() ? 0.0 : it->second.first);
    sums.push_back(it == local.end() ? 0.0 : it->second.second);
  }
  if (comm.world_size() > 1 && !sums.empty()) comm.all_reduce_sum(sums.data(), sums.size());
  std::map<std::string, double> means;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (sums[2 * i + 1] > 0) means[keys[i]] = sums[2 * i] / sums[2 * i + 1];
  return means;
}

// `t` on `device`: itself (the same buffer, moved: no new reference) when it is there already.
torch::Tensor on_device(torch::Tensor t, const torch::Device& device) {
  if (t.device() == device) return t;  // a parameter returned by name is moved, never copied
  return t.to(device);
}

// run.log_level: debug: the resident memory and its high-water mark at a point of the step.
void trace_memory(const char* where) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  spdlog::debug("memory at {}: resident {:.3f} GiB, peak {:.3f} GiB", where, double(current_rss_bytes()) / (1 << 30),
                double(peak_rss_bytes()) / (1 << 30));
}

// Slices of the start-weight comparison: bounded temporaries, whatever the model's size.
constexpr int64_t kCompareSlice = 1 << 22;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Row ranges [begin, end) of at most `chunk` rows (0: one range).
std::vector<std::pair<int64_t, int64_t>> row_chunks(int64_t begin, int64_t end, int64_t chunk) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t step = chunk > 0 ? chunk : std::max<int64_t>(end - begin, 1);
  for (int64_t b = begin; b < end; b += step) out.emplace_back(b, std::min(end, b + step));
  return out;
}

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

torch::Tensor RolloutBatch::targets(const torch::Tensor& rows, int64_t width) const {
  return tokens.index_select(0, rows).narrow(1, prompt_len, width);
}

int64_t RolloutBatch::width(int64_t begin, int64_t end) const {
  int64_t w = 1;
  for (int64_t r = begin; r < end; ++r) w = std::max(w, lengths_host[std::size_t(r)]);
  return w;
}

int64_t RolloutBatch::forward_positions(int64_t begin, int64_t end) const {
  if (begin >= end) return 0;
  const int64_t distinct = prompt_of_row_host[std::size_t(end - 1)] - prompt_of_row_host[std::size_t(begin)] + 1;
  return distinct * prompt_len + (end - begin) * (width(begin, end) - 1);
}

GrpoTrainer::GrpoTrainer(const RunConfig& config, const RunContext& ctx, dist::Communicator& comm,
                         torch::Tensor master, const std::vector<data::TaskRecord>& train,
                         std::vector<data::TaskRecord> my_test, torch::Device device,
                         precision::ComputeMode compute, FrozenBase base, std::shared_ptr<reward::Verifier> scorer)
    : cfg_(config),
      ctx_(ctx),
      comm_(comm),
      device_(device),
      train_(train),
      my_test_(std::move(my_test)),
      // precision.offload: optimizer keeps the master (and moments) on the host.
      weights_(config.model,
               on_device(std::move(master),
                         config.precision.offload == precision::Offload::optimizer ? torch::Device(torch::kCPU) : device),
               with_compute(config.precision, compute), ctx.seeds.rounding, &comm,
               FrozenBase{std::move(base.spec), base.weights.defined() ? on_device(std::move(base.weights), device)
                                                                       : torch::Tensor(),
                          torch::Tensor()},
               device),
      verifier_name_(reward::verifier_name(config.reward, config::enum_name(config.data.task))),
      verifier_(scorer ? std::move(scorer) : std::shared_ptr<reward::Verifier>(reward::make_verifier(verifier_name_, config.reward))),
      order_(train.size(), ctx.seeds.data),
      // Rollouts draw counter-based uniforms (rollout::sampling_uniforms); this generator is never
      // advanced by training and stays in checkpoints (rng.bin) only for their format.
      sampling_(at::make_generator<at::CPUGeneratorImpl>(ctx.seeds.sampling)),
      skip_guard_(config, "train") {
  const auto& g = cfg_.grpo;
  for (int r = 0; r < comm_.world_size(); ++r)
    rows_of_.push_back(dist::rank_rows(g.prompts_per_step, g.minibatches, g.group_size, comm_.world_size(), r));
  // The reference is the starting policy as the trainer computes with it (its forward weights: the
  // compute dtype, or FP32 where the forward runs in FP32), so at step 1 the policy equals it.
  // With LoRA it is the frozen base alone: a second model over the same weights, without adapters.
  // PiSSA: the start policy is the residual base plus the start adapters, and so is the reference.
  if (base.start.defined()) pissa_start_ = base.start.to(torch::kCPU);
  if (weights_.lora()) {
    start_adapters_ = weights_.compute().clone();
    if (g.kl_coef > 0 || g.ref_metrics_every > 0) {
      reference_ = std::make_unique<model::LlamaModel>(cfg_.model, weights_.model().flat_weights());
      if (pissa_start_.defined())
        reference_->set_adapters(model::lora_spec(cfg_.lora), weights_.model().adapter_flat().clone());
    }
  } else if (g.kl_coef > 0 || g.ref_metrics_every > 0)
    reference_ = std::make_unique<model::LlamaModel>(cfg_.model, weights_.model().flat_weights().clone());
  else
    base_reader_ = std::make_unique<model::FlatWeightsReader>(cfg_.grpo.base_model, cfg_.model);
  gen_opts_.sampling = cfg_.rollout;
  gen_opts_.stop_ids = ctx_.stop_ids;
  gen_opts_.pad_id = ctx_.tokenizer.pad_id();
  loss_opts_.clip_low = g.clip_low;
  loss_opts_.clip_high = g.clip_high;
  loss_opts_.clip_ratio_c = g.clip_ratio_c;
  loss_opts_.importance = g.importance_ratio;
  loss_opts_.aggregation = g.loss_aggregation;
  loss_opts_.max_new_tokens = cfg_.rollout.max_new_tokens;
  loss_opts_.kl_coef = g.kl_in == algo::KlIn::loss ? g.kl_coef : 0.0;
  loss_opts_.kl_estimator = g.kl_estimator;
  loss_opts_.entropy_coef = g.entropy_coef;
  total_opt_steps_ = g.steps * g.minibatches * g.ppo_epochs;
}

std::optional<uint64_t> GrpoTrainer::dropout_key(int64_t step, int64_t epoch) const {
  if (!weights_.lora() || cfg_.lora.dropout <= 0) return std::nullopt;
  const precision::Philox4x32 k =
      precision::philox4x32_10(precision::Philox4x32{{uint32_t(step), uint32_t(uint64_t(step) >> 32), uint32_t(epoch), 0}},
                               uint32_t(ctx_.seeds.dropout), uint32_t(ctx_.seeds.dropout >> 32));
  return uint64_t(k.v[0]) | (uint64_t(k.v[1]) << 32);
}

std::string GrpoTrainer::reference_dtype() const {
  return reference_ ? std::string(c10::toString(reference_->flat_weights().scalar_type())) : "none";
}

bool GrpoTrainer::reference_due(int64_t step) const {
  const int64_t every = cfg_.grpo.ref_metrics_every;
  return loss_opts_.kl_coef > 0 || (every > 0 && (step % every == 0 || step == cfg_.grpo.steps));
}

// Advantages of this rank's groups; batch statistics (reinforce_pp, scale_rewards: batch) are
// those of the whole batch, summed over the ranks, so they do not depend on the world size.
algo::Advantages GrpoTrainer::advantages_of(const std::vector<float>& rewards) const {
  const train::GrpoConfig& g = cfg_.grpo;
  algo::RewardMoments batch = algo::reward_moments(rewards);
  if (algo::resolved_scale(g.advantage, g.scale_rewards) == algo::RewardScale::batch ||
      g.advantage == algo::AdvantageMode::reinforce_pp) {
    double m[3] = {batch.n, batch.sum, batch.sumsq};
    comm_.all_reduce_sum(m, 3);
    batch = {m[0], m[1], m[2]};
  }
  return algo::group_advantages(rewards, g.group_size, g.advantage, 1e-6, g.scale_rewards, &batch);
}

MetricsLine GrpoTrainer::step(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  progress_.start_step(step);
  trace_memory("step start");
  Timings time;
  time.comm_before = comm_.stats();
  Rollouts ro;
  Scores sc;
  Sampling smp;
  sample(step, &ro, &sc, &smp, &time);
  trace_memory("rollout");
  if (phase_end_) phase_end_("rollout");
  if (reward::scorer_can_fail(cfg_.reward, verifier_name_)) check_reward_errors(step, sc, smp);
  if (sc.not_applicable > 0)
    spdlog::warn("step {}: every reward function returned None for {} completion(s) of this rank (not_applicable: "
                 "left out of their groups' baselines, advantage 0); the first was for the prompt: {}",
                 step, sc.not_applicable, sc.first_not_applicable.substr(0, 300));
  RolloutBatch batch = make_batch(ro);
  batch.global_rows_host = rows_of_[std::size_t(comm_.rank())];
  batch.global_rows = torch::tensor(batch.global_rows_host, torch::kLong).to(device_);
  std::vector<float> rewards = sc.rewards;
  if (cfg_.grpo.kl_in == algo::KlIn::reward) {
    const torch::Tensor penalty = reward_kl(batch).to(torch::kDouble).cpu();
    const double* p = penalty.data_ptr<double>();
    for (std::size_t i = 0; i < rewards.size(); ++i) {
      rewards[i] = float(double(rewards[i]) - p[i]);
      sc.kl_penalty += p[i];
    }
  }
  const algo::Advantages adv = advantages_of(rewards);
  const torch::Tensor advantages = torch::tensor(adv.values).to(device_);  // (N)
  const bool with_ref = reference_due(step);
  // One epoch of one minibatch: the training forward measures too (same weights as sampling).
  std::optional<Measurement> meas;
  // lora.dropout: the update's forwards drop adapter inputs, so the policy is measured on its own.
  if (cfg_.grpo.ppo_epochs != 1 || cfg_.grpo.minibatches != 1 || cfg_.lora.dropout > 0) meas = measure(batch, with_ref);
  const auto t_update = std::chrono::steady_clock::now();
  const UpdateStats up = update(step, batch, advantages, with_ref, &meas);
  time.update = seconds_since(t_update);
  if (phase_end_) phase_end_("update");
  time.step = seconds_since(t0);
  return metrics(step, sc, smp, adv, batch, *meas, up, time);
}

// reward.function: the step's failures are logged (this rank's first, with its traceback), and more
// than max_error_frac of the sampled completions stops the run before the update, on every rank.
void GrpoTrainer::check_reward_errors(int64_t step, const Scores& sc, const Sampling& smp) {
  if (sc.errors > 0)
    spdlog::warn("step {}: {} completion(s) of this rank failed to score (reward_error, reward 0); the first:\n{}", step,
                 sc.errors, sc.first_error);
  double failed = double(sc.errors);
  comm_.all_reduce_sum(&failed, 1);
  const double sampled = double(cfg_.grpo.prompts_per_step * cfg_.grpo.group_size) * double(smp.rounds);
  const reward::ErrorLimit limit = reward::error_limit(cfg_.reward, verifier_name_);
  if (failed > limit.max_frac * sampled)
    throw UserError(limit.scorer + ": " + std::to_string(int64_t(failed)) + " of " + std::to_string(int64_t(sampled)) +
                    " completions of step " + std::to_string(step) + " failed to score, more than " + limit.key +
                    " = " + config::format_double(limit.max_frac) +
                    (sc.first_error.empty() ? std::string() : "; the first on this rank:\n" + sc.first_error));
}

std::vector<const data::TaskRecord*> GrpoTrainer::draw_records() {
  std::vector<const data::TaskRecord*> records;
  for (int64_t p = 0; p < cfg_.grpo.prompts_per_step; ++p) records.push_back(&train_[order_.next()]);
  return records;
}

void GrpoTrainer::sample(int64_t step, Rollouts* ro, Scores* sc, Sampling* smp, Timings* time) {
  const auto& g = cfg_.grpo;
  const auto roll_and_score = [&](int64_t round, const std::vector<const data::TaskRecord*>& records) {
    const auto t = std::chrono::steady_clock::now();
    Rollouts r = rollout(step, round, records);
    const auto t_reward = std::chrono::steady_clock::now();
    time->rollout += std::chrono::duration<double>(t_reward - t).count();
    Scores s = score(r, step);
    time->reward += seconds_since(t_reward);
    return std::make_pair(std::move(r), std::move(s));
  };
  if (g.filter_groups == algo::GroupFilter::none) {
    std::tie(*ro, *sc) = roll_and_score(0, draw_records());
    return;
  }
  // Dynamic sampling: every rank sees every group of each round, so all choose the same batch and
  // each takes its rows of it, whatever the world size.
  std::vector<Candidate> candidates;
  std::vector<bool> informative;
  int64_t useful = 0;
  smp->rounds = 0;
  for (int64_t round = 0; round <= g.oversample && useful < g.prompts_per_step; ++round) {
    const std::vector<const data::TaskRecord*> records = draw_records();
    const auto [r, s] = roll_and_score(round, records);
    if (sc->errors == 0) sc->first_error = s.first_error;
    sc->errors += s.errors;  // over every completion this rank sampled
    if (sc->not_applicable == 0) sc->first_not_applicable = s.first_not_applicable;
    sc->not_applicable += s.not_applicable;
    sc->add_extra(s.extra);
    std::vector<Candidate> groups = gather_groups(records, r, s);
    ++smp->rounds;
    for (Candidate& c : groups) {
      for (const float x : c.rewards)
        if (!std::isnan(x)) {  // a completion no scorer applied to is in no mean
          smp->reward_sum += x;
          smp->rows += 1;
        }
      const bool varies = algo::informative_groups(c.rewards, g.group_size)[0];
      useful += varies;
      informative.push_back(varies);
      candidates.push_back(std::move(c));
    }
  }
  const algo::GroupSelection chosen = algo::select_groups(informative, g.prompts_per_step);
  smp->filled = chosen.filled;
  smp->dropped = int64_t(informative.size()) - useful - chosen.filled;
  const int64_t G = g.group_size;
  for (int64_t row : rows_of_[std::size_t(comm_.rank())]) {
    const std::size_t q = std::size_t(row / G), j = std::size_t(row % G);
    const Candidate& c = candidates[std::size_t(chosen.groups[q])];
    ro->records.push_back(c.record);
    ro->prompts.push_back(j == 0 ? prompt_ids(*c.record, ctx_.prompts, ctx_.tokenizer) : ro->prompts.back());
    ro->completions.push_back(c.completions[j]);
    ro->in_loss.push_back(q < chosen.groups.size() - std::size_t(chosen.filled) ? 1 : 0);
    sc->rewards.push_back(c.rewards[j]);
    sc->right.push_back(c.right[j]);
  }
  sc->tally(ro->completions);
}

// G completions per prompt of this rank's share, from the current compute weights. Every rank
// draws the records of the whole batch (same stream on all ranks) and keeps its rows; the sampling
// uniforms are keyed by (seed, step, global row, token), so the samples do not depend on the world
// size, and a checkpoint needs only the step to continue them. Round r > 0 of dynamic sampling
// keys its rows as r x prompts_per_step x G + row, distinct from every other round's.
GrpoTrainer::Rollouts GrpoTrainer::rollout(int64_t step, int64_t round,
                                           const std::vector<const data::TaskRecord*>& step_records) {
  const int64_t G = cfg_.grpo.group_size;
  const std::vector<int64_t>& my_rows = rows_of_[std::size_t(comm_.rank())];
  Rollouts ro;
  std::vector<int64_t> keys;
  for (int64_t row : my_rows) {
    ro.records.push_back(step_records[std::size_t(row / G)]);
    // A prompt's G rows are consecutive, starting with completion 0: tokenize it once.
    ro.prompts.push_back(row % G == 0 ? prompt_ids(*ro.records.back(), ctx_.prompts, ctx_.tokenizer)
                                      : ro.prompts.back());
    keys.push_back(round * cfg_.grpo.prompts_per_step * G + row);
  }
  gen_opts_.uniforms = rollout::sampling_uniforms(ctx_.seeds.sampling, step, keys, cfg_.rollout.max_new_tokens,
                                                  device_);  // (rows, T)
  gen_opts_.progress = [this](const rollout::GenerateProgress& p) {
    if (startup_ && p.tokens_done == 1) {
      startup_->mark("first rollout token");
      spdlog::info("train: start-up {}", startup_->summary());
      if (comm_.rank() == 0) record_in_run_json(ctx_, {{"startup", startup_->to_json()}});
      startup_ = nullptr;
    }
    progress_.rollout(p);
  };
  ro.completions = rollout::generate(weights_.model(), ro.prompts, gen_opts_, sampling_);
  return ro;
}

// Each row as doubles (exact for rewards, token ids and FP32 log-probs): reward, correct, finish
// (0 eos, 1 length), length, then max_new_tokens token ids and as many log-probs.
std::vector<GrpoTrainer::Candidate> GrpoTrainer::gather_groups(const std::vector<const data::TaskRecord*>& records,
                                                                const Rollouts& ro, const Scores& sc) const {
  const int64_t G = cfg_.grpo.group_size, T = cfg_.rollout.max_new_tokens;
  const std::size_t width = std::size_t(4 + 2 * T), mine = ro.completions.size();
  std::vector<double> send(mine * width, 0.0);
  for (std::size_t i = 0; i < mine; ++i) {
    double* x = send.data() + i * width;
    const rollout::Completion& c = ro.completions[i];
    x[0] = sc.rewards[i];
    x[1] = sc.right[i];
    x[2] = c.finish == rollout::FinishReason::length ? 1 : 0;
    x[3] = double(c.tokens.size());
    for (std::size_t t = 0; t < c.tokens.size(); ++t) {
      x[4 + t] = c.tokens[t];
      x[4 + std::size_t(T) + t] = c.logprobs[t];
    }
  }
  std::vector<double> all(send.size() * std::size_t(comm_.world_size()));
  comm_.all_gather(send.data(), all.data(), send.size(), dist::DataType::f64);
  std::vector<Candidate> groups(records.size());
  for (std::size_t p = 0; p < groups.size(); ++p) {
    groups[p].record = records[p];
    groups[p].completions.resize(std::size_t(G));
    groups[p].rewards.resize(std::size_t(G));
    groups[p].right.resize(std::size_t(G));
  }
  for (std::size_t r = 0; r < rows_of_.size(); ++r) {
    if (rows_of_[r].size() != mine) throw std::logic_error("gather_groups: ranks hold different row counts");
    for (std::size_t k = 0; k < mine; ++k) {
      const double* x = all.data() + (r * mine + k) * width;
      const int64_t row = rows_of_[r][k];
      Candidate& c = groups[std::size_t(row / G)];
      const std::size_t j = std::size_t(row % G), n = std::size_t(x[3]);
      c.rewards[j] = float(x[0]);
      c.right[j] = x[1] != 0;
      rollout::Completion& out = c.completions[j];
      out.finish = x[2] != 0 ? rollout::FinishReason::length : rollout::FinishReason::eos;
      out.tokens.resize(n);
      out.logprobs.resize(n);
      for (std::size_t t = 0; t < n; ++t) {
        out.tokens[t] = int32_t(x[4 + t]);
        out.logprobs[t] = float(x[4 + std::size_t(T) + t]);
      }
    }
  }
  return groups;
}

void GrpoTrainer::Scores::tally(const std::vector<rollout::Completion>& completions) {
  correct = gen_tokens = truncated = 0;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    correct += right[i];
    gen_tokens += double(completions[i].tokens.size());
    truncated += completions[i].finish == rollout::FinishReason::length;
  }
}

void GrpoTrainer::Scores::add_extra(const std::map<std::string, std::pair<double, double>>& more) {
  for (const auto& [key, sum_count] : more) {
    extra[key].first += sum_count.first;
    extra[key].second += sum_count.second;
  }
}

namespace {

// The kind of a reward_error: its last line up to the first ':' ("ValueError" of a traceback ending
// "ValueError: bad column", "returned str", "timed out after 60 s (the worker was restarted)").
std::string error_kind(const std::string& error) {
  std::string line = error.substr(0, error.find_last_not_of(" \n") + 1);
  const std::size_t newline = line.find_last_of('\n');
  if (newline != std::string::npos) line = line.substr(newline + 1);
  return line.substr(0, std::min(line.find(':'), std::size_t(120)));
}

}  // namespace

GrpoTrainer::Scores GrpoTrainer::score(const Rollouts& ro, int64_t step) const {
  Scores sc;
  const std::size_t n = ro.completions.size();
  sc.rewards.resize(n);
  sc.right.resize(n);
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& c : ro.completions) {
    texts.push_back(completion_text(c.tokens, ctx_.tokenizer, ctx_.stop_ids));
    ids.push_back(c.tokens);
  }
  reward::ScoringContext context;  // TRL's completion_ids and trainer_state
  context.completion_ids = &ids;
  context.global_step = step - 1;
  context.max_steps = cfg_.grpo.steps;
  context.epoch = double(step - 1) * double(cfg_.grpo.prompts_per_step) / double(std::max<std::size_t>(train_.size(), 1));
  context.world_process_zero = comm_.rank() == 0;
  context.stop = stop_flag_;
  const std::vector<reward::RewardResult> results = verifier_->score_batch(texts, ro.records, context);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& c = ro.completions[i];
    const reward::RewardResult& r = results[i];
    double reward = r.reward;
    if (cfg_.grpo.overlong == algo::Overlong::soft_penalty)
      reward += algo::overlong_penalty(int64_t(c.tokens.size()), cfg_.rollout.max_new_tokens, cfg_.grpo.overlong_buffer);
    sc.rewards[i] = float(reward);
    sc.right[i] = r.status == reward::RewardStatus::correct;
    if (r.status == reward::RewardStatus::error) {
      if (sc.errors == 0) sc.first_error = r.error;
      ++sc.errors;
      if (reported_error_kinds_.insert(error_kind(r.error)).second)  // each kind's whole text, once a run
        spdlog::warn("step {}: a completion failed to score with a new kind of error ({}):\n{}", step,
                     error_kind(r.error), r.error);
    }
    if (r.status == reward::RewardStatus::not_applicable) {
      if (sc.not_applicable == 0) sc.first_not_applicable = ro.records[i]->prompt;
      ++sc.not_applicable;
    }
    const auto add = [&sc](const std::string& metric, double value) {
      sc.extra[metric].first += value;
      sc.extra[metric].second += 1;
    };
    for (const auto& [key, value] : r.extra) add("reward_extra/" + key, value);
    for (const auto& [name, value] : r.terms) add("reward/" + name, value);
    for (const auto& [name, values] : r.metrics)
      for (const double value : values) add("reward_metric/" + name, value);
  }
  sc.tally(ro.completions);
  return sc;
}

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
                                                        batch.targets(rows, w), cfg_.grpo.logprob_chunk_tokens).logp;
    const torch::Tensor sampled = positions.narrow(1, 0, w) < batch.lengths.index_select(0, rows).unsqueeze(1);  // (n, w)
    parts.push_back(algo::sequence_kl(batch.old_logp.index_select(0, rows).narrow(1, 0, w), ref_logp, sampled,
                                      cfg_.grpo.kl_estimator));
  }
  return cfg_.grpo.kl_coef * torch::cat(parts);
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
    const bool in_loss = (cfg_.grpo.overlong != algo::Overlong::filter || outs[n].finish != rollout::FinishReason::length) &&
                         (ro.in_loss.empty() || ro.in_loss[std::size_t(n)]);
    len[n] = int64_t(outs[n].tokens.size());
    b.lengths_host[std::size_t(n)] = len[n];
    for (std::size_t t = 0; t < outs[n].tokens.size(); ++t) {
      tok[n][P + int64_t(t)] = outs[n].tokens[t];
      msk[n][int64_t(t)] = in_loss ? 1.0f : 0.0f;
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
  return b;
}

algo::HeadInput GrpoTrainer::completion_head(const model::LlamaModel& m, const RolloutBatch& b, int64_t begin,
                                             int64_t end, std::optional<uint64_t> dropout_key) const {
  // The rows' distinct prompts are a contiguous range (consecutive rows share them).
  const int64_t first = b.prompt_of_row_host[std::size_t(begin)];
  const int64_t distinct = b.prompt_of_row_host[std::size_t(end - 1)] - first + 1;
  const model::SharedPrompts sp{
      b.prompts.narrow(0, first, distinct),
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
    parts.push_back(full_width(algo::head_log_probs(completion_head(weights_.model(), batch, b, e), ref,
                                                    batch.targets(rows, batch.width(b, e)),
                                                    cfg_.grpo.logprob_chunk_tokens).stats,
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
  const int64_t w = batch.width(cb, ce);  // the chunk's longest completion: no padding past it
  const torch::Tensor targets = batch.targets(rows, w);                         // (n, w)
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
  const algo::HeadLogProbs head = algo::head_log_probs(policy, ref_in, targets, g.logprob_chunk_tokens,
                                                       weights_.model().head_grad_sink());
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

StepSums GrpoTrainer::step_sums(const Scores& sc, const algo::Advantages& adv, const RolloutBatch& batch,
                                const Measurement& meas, const UpdateStats& up) {
  const bool with_ref = meas.ref_logp.defined();
  // Device-side sums over this rank's completion tokens, copied to the host in one go.
  const torch::Tensor& mask = batch.mask;
  const auto masked_sum = [&](const torch::Tensor& x) { return (x * mask).sum(); };
  const torch::Tensor zero = torch::zeros({}, mask.options());
  std::vector<torch::Tensor> sums{
      with_ref ? masked_sum(algo::kl_estimate(meas.logp, meas.ref_logp, algo::KlEstimator::k3)) : zero,
      with_ref ? masked_sum(meas.kl_exact) : zero, masked_sum(meas.entropy),
      masked_sum((meas.logp - batch.old_logp).abs()), mask.sum(),
      // KL(sampler || trainer) from the sampled tokens (k3 of the trainer's log-probs before the update).
      masked_sum(algo::kl_estimate(batch.old_logp, meas.logp, algo::KlEstimator::k3))};
  const double tis_cap = cfg_.grpo.tis_cap;
  if (tis_cap > 0) {
    sums.push_back(masked_sum(algo::tis_weights(meas.logp, batch.old_logp, tis_cap)));
    sums.push_back(masked_sum(((meas.logp - batch.old_logp) > std::log(tis_cap)).to(mask.scalar_type())));
  }
  for (torch::Tensor& t : sums) t = t.to(torch::kDouble);  // exact for float sums and counts < 2^53
  const torch::Tensor host = torch::stack(sums).cpu();
  const double* h = host.data_ptr<double>();
  StepSums s;
  s.correct = sc.correct;
  s.generated_tokens = sc.gen_tokens;
  s.truncated = sc.truncated;
  s.kl_penalty = sc.kl_penalty;
  s.reward_errors = double(sc.errors);
  s.zero_variance_groups = double(adv.zero_variance_groups);
  s.groups = double(adv.groups);
  s.kl_ref_k3 = h[0];
  s.kl_ref_exact = h[1];
  s.entropy = h[2];
  s.logprob_mismatch = h[3];
  s.tokens = h[4];
  s.logprob_mismatch_k3 = h[5];
  s.tis_weight = tis_cap > 0 ? h[6] : 0.0;
  s.tis_clipped = tis_cap > 0 ? h[7] : 0.0;
  s.update_tokens = up.tokens;
  s.clipped = up.clipped;
  s.clipped_low = up.clipped_low;
  s.clipped_high = up.clipped_high;
  s.dual_clipped = up.dual_clipped;
  s.forward_positions = up.forward_positions;
  s.completion_positions = up.completion_positions;
  s.completion_tokens = up.completion_tokens;
  const int64_t changed_here = changed_from_start();  // this rank's shard
  s.ranks_not_counting = changed_here < 0 ? 1.0 : 0.0;
  s.changed = double(std::max<int64_t>(changed_here, 0));
  return s;
}

MetricsLine GrpoTrainer::metrics(int64_t step, const Scores& sc, const Sampling& smp, const algo::Advantages& adv,
                                 const RolloutBatch& batch, const Measurement& meas, const UpdateStats& up,
                                 const Timings& time) {
  StepSums s = step_sums(sc, adv, batch, meas, up);
  std::vector<double> flat = s.flat();
  comm_.all_reduce_sum(flat.data(), flat.size());  // every rank's
  s.assign(flat);
  MetricsLine m;
  m["step"] = step;
  add_reward_metrics(m, sc, s);
  add_policy_metrics(m, s, up, meas.ref_logp.defined());
  add_scorer_metrics(m, sc, smp, s);
  add_step_metrics(m, sc, s, up, time);
  add_sticking_metrics(m, up);
  return m;
}

void GrpoTrainer::add_reward_metrics(MetricsLine& m, const Scores& sc, const StepSums& s) const {
  // Rewards of the whole batch, back in global row order.
  const int64_t N_global = cfg_.grpo.prompts_per_step * cfg_.grpo.group_size;
  std::vector<float> gathered(static_cast<std::size_t>(N_global)), all_rewards(gathered.size());
  comm_.all_gather(sc.rewards.data(), gathered.data(), sc.rewards.size(), dist::DataType::f32);
  for (std::size_t r = 0, k = 0; r < rows_of_.size(); ++r)
    for (int64_t row : rows_of_[r]) all_rewards[std::size_t(row)] = gathered[k++];
  const torch::Tensor all = torch::tensor(all_rewards);
  const torch::Tensor r = all.index({torch::logical_not(torch::isnan(all))});  // not_applicable ones left out
  m["reward_mean"] = r.numel() > 0 ? r.mean().item<double>() : 0.0;
  m["reward_std"] = r.numel() > 1 ? r.std().item<double>() : 0.0;
  if (r.numel() < all.numel()) m["not_applicable_frac"] = double(all.numel() - r.numel()) / double(all.numel());
  m["accuracy"] = s.correct / double(N_global);
}

void GrpoTrainer::add_policy_metrics(MetricsLine& m, const StepSums& s, const UpdateStats& up, bool with_ref) const {
  const double rows = double(cfg_.grpo.prompts_per_step * cfg_.grpo.group_size), tokens = std::max(s.tokens, 1.0);
  // Steps without the reference pass (grpo.ref_metrics_every) leave its metrics out.
  m["ref_metrics"] = with_ref;
  if (with_ref) {
    m["kl_ref_k3"] = s.kl_ref_k3 / tokens;
    m["kl_ref_exact"] = s.kl_ref_exact / tokens;
  }
  m["entropy"] = s.entropy / tokens;
  m["response_len_mean"] = s.generated_tokens / rows;
  m["overlong_frac"] = s.truncated / rows;  // completions cut at rollout.max_new_tokens
  // Each clip fraction: the mean over the optimizer steps of clipped tokens / tokens.
  m["clip_frac"] = s.clip_mean(s.clipped);
  m["clip_frac_low"] = s.clip_mean(s.clipped_low);
  m["clip_frac_high"] = s.clip_mean(s.clipped_high);
  if (cfg_.grpo.clip_ratio_c > 0) m["dual_clip_frac"] = s.clip_mean(s.dual_clipped);
  m["grad_norm"] = up.grad_norm;
  m["lr"] = up.lr;
  m["loss_scale"] = up.loss_scale;
  m["skipped_steps"] = skipped_;
  m["sticking_frac"] = up.last.elements ? 1.0 - double(up.last.changed) / double(up.last.elements) : 0.0;
  m["update_ratio"] = up.update_ratio;
  m["logprob_mismatch"] = s.logprob_mismatch / tokens;
  m["logprob_mismatch_k3"] = s.logprob_mismatch_k3 / tokens;
  if (cfg_.grpo.kl_in == algo::KlIn::reward) m["kl_reward_penalty"] = s.kl_penalty / rows;
}

void GrpoTrainer::add_scorer_metrics(MetricsLine& m, const Scores& sc, const Sampling& smp, const StepSums& s) const {
  const double rows = double(cfg_.grpo.prompts_per_step * cfg_.grpo.group_size), tokens = std::max(s.tokens, 1.0);
  // Over every completion sampled (all rounds of dynamic sampling).
  if (reward::scorer_can_fail(cfg_.reward, verifier_name_)) m["reward_error_frac"] = s.reward_errors / (rows * double(smp.rounds));
  for (const auto& [metric, mean] : extra_means(comm_, sc.extra)) m[metric] = mean;
  if (cfg_.grpo.tis_cap > 0) {
    m["tis_weight_mean"] = s.tis_weight / tokens;
    m["tis_clip_frac"] = s.tis_clipped / tokens;
  }
  if (cfg_.grpo.filter_groups != algo::GroupFilter::none) {
    m["sampling_rounds"] = smp.rounds;
    m["groups_dropped"] = smp.dropped;
    m["groups_filled"] = smp.filled;
    m["sampled_reward_mean"] = smp.reward_sum / std::max(smp.rows, 1.0);
  }
}

void GrpoTrainer::add_step_metrics(MetricsLine& m, const Scores& sc, const StepSums& s, const UpdateStats& up,
                                   const Timings& time) const {
  m["zero_adv_frac"] = s.zero_variance_groups / std::max(1.0, s.groups);
  m["tokens_per_s"] = sc.gen_tokens / std::max(time.rollout, 1e-9);
  m["step_seconds"] = time.step;
  m["rollout_seconds"] = time.rollout;
  m["reward_seconds"] = time.reward;
  m["forward_backward_seconds"] = time.update - up.optimizer_seconds;
  m["optimizer_seconds"] = up.optimizer_seconds;
  m["collective_seconds"] = comm_.stats().seconds - time.comm_before.seconds;
  m["collective_bytes"] = double(comm_.stats().bytes - time.comm_before.bytes);
  // Every rank counted its shard; left out once any rank could not.
  if (s.ranks_not_counting == 0) m["changed_from_start_frac"] = s.changed / double(weights_.layout().total);
  m["train_tokens"] = s.forward_positions;
  // The padding the training forwards computed: each row chunk runs to its longest completion.
  m["completion_padding_frac"] = 1.0 - s.completion_tokens / std::max(s.completion_positions, 1.0);
  m["train_padding_tokens"] = s.completion_positions - s.completion_tokens;  // of train_tokens: padding positions
}

void GrpoTrainer::add_sticking_metrics(MetricsLine& m, const UpdateStats& up) const {
  const auto& entries = weights_.layout().entries;
  const std::vector<uint64_t>& changed = up.last.changed_per_tensor;
  MetricsLine per_tensor = MetricsLine::object();
  for (std::size_t i = 0; i < entries.size() && i < changed.size(); ++i)
    per_tensor[entries[i].name] = 1.0 - double(changed[i]) / double(std::max<int64_t>(1, entries[i].numel));
  m["sticking_frac_per_tensor"] = per_tensor;
  if (!weights_.lora()) return;
  // The adapters by projection and factor ("q_proj.lora_A"), summed over the layers.
  std::map<std::string, std::pair<double, double>> by_module;  // changed, elements
  for (std::size_t i = 0; i < entries.size() && i < changed.size(); ++i) {
    const std::string name = entries[i].name.substr(0, entries[i].name.rfind('.'));  // without ".weight"
    const std::size_t cut = name.rfind('.', name.rfind('.') - 1);
    auto& [changed_sum, elements] = by_module[name.substr(cut + 1)];
    changed_sum += double(changed[i]);
    elements += double(entries[i].numel);
  }
  MetricsLine per_module = MetricsLine::object();
  for (const auto& [module, ce] : by_module) per_module[module] = 1.0 - ce.first / std::max(1.0, ce.second);
  m["sticking_frac_per_module"] = per_module;
}

int64_t GrpoTrainer::changed_from_start() {
  if (changed_lost_) return -1;
  torch::NoGradGuard no_grad;
  const torch::Tensor& now = weights_.compute();
  const int64_t begin = weights_.shard_begin(), end = begin + weights_.master().numel();
  const torch::ScalarType bits = now.element_size() == 4 ? torch::kInt : torch::kShort;
  torch::Tensor count = torch::zeros({}, now.options().dtype(torch::kLong));
  try {
    torch::Tensor start_master, start_bits;  // host buffers of the base path
    for (int64_t b = begin; b < end; b += kCompareSlice) {
      const int64_t n = std::min(kCompareSlice, end - b);
      const torch::Tensor cur = now.narrow(0, b, n);
      if (start_adapters_.defined()) {  // LoRA: against the adapters' start bits
        count += cur.view(bits).ne(start_adapters_.narrow(0, b, n).view(bits)).sum();
        continue;
      }
      if (reference_) {
        // The reference holds the start compute weights, widened to FP32 when the forward runs in
        // FP32: widening is exact and one-to-one on the bits, so comparing widened bits is the same.
        const torch::Tensor ref = reference_->flat_weights().narrow(0, b, n);
        const bool same = ref.scalar_type() == cur.scalar_type();
        count += (same ? cur.view(bits).ne(ref.view(bits)) : cur.to(ref.scalar_type()).view(torch::kInt).ne(ref.view(torch::kInt))).sum();
        continue;
      }
      if (!start_master.defined()) {
        start_master = torch::empty({std::min(kCompareSlice, end - begin)}, torch::kFloat32);
        start_bits = torch::empty({start_master.numel()}, torch::TensorOptions().dtype(now.scalar_type()));
      }
      // grpo.round_base_to_fp8: the base's own channel scales first (one pass over it, once).
      if (cfg_.grpo.round_base_to_fp8 && !base_fp8_)
        base_fp8_ = std::make_unique<Fp8Channels>(fp8_channels(
            weights_.layout(), [&](int64_t at, int64_t count_n, float* out) { base_reader_->read(at, count_n, out); },
            cfg_.precision.threads));
      const auto read_start = [&](int64_t at, int64_t count_n, float* out) {
        base_reader_->read(at, count_n, out);
        if (cfg_.grpo.round_base_to_fp8)
          round_base_to_fp8(out, at, count_n, *base_fp8_, cfg_.precision.threads);
        else if (cfg_.grpo.round_base_to_bf16)
          round_base_to_grid(out, count_n, cfg_.precision.analog_mantissa_bits);
      };
      // FP8: the start weights' channel exponents, from one pass over the start master (once).
      if (precision::is_fp8(cfg_.precision.mode) && !start_fp8_)
        start_fp8_ = std::make_unique<Fp8Channels>(fp8_channels(weights_.layout(), read_start, cfg_.precision.threads));
      float* m = start_master.data_ptr<float>();
      read_start(b, n, m);
      weights_.materialize_slice(m, b, n, start_bits.data_ptr(), 0, start_fp8_.get());
      count += cur.view(bits).ne(start_bits.narrow(0, 0, n).to(now.device()).view(bits)).sum();
    }
  } catch (const UserError& e) {
    spdlog::warn("train: changed_from_start_frac is no longer logged: {}", e.what());
    changed_lost_ = true;
    return -1;
  }
  return count.item<int64_t>();
}

double GrpoTrainer::evaluate() {
  EvalOptions opts;
  opts.max_new_tokens = cfg_.rollout.max_new_tokens;
  opts.stop_ids = ctx_.stop_ids;
  double correct_records[2] = {0, double(my_test_.size())};  // each rank scores its share
  if (!my_test_.empty())
    correct_records[0] = train::evaluate(weights_.model(), ctx_.tokenizer, my_test_, ctx_.prompts, *verifier_, opts)
                             .accuracy * double(my_test_.size());
  comm_.all_reduce_sum(correct_records, 2);
  return correct_records[0] / std::max(correct_records[1], 1.0);
}

void GrpoTrainer::restore(const TrainerState& st, const std::string& where) {
  // PiSSA: the residual base and the start adapters were computed again for this resume; their SVD
  // depends on the thread count and the CPU, and a different one would continue on another base.
  if (!st.pissa_start.empty() && pissa_start_.defined() && pissa_start_checksum() != st.pissa_start)
    throw UserError(where + ": lora.init: pissa: the SVD of the base computed for this resume differs from the one "
                    "the run started with (start adapters " + st.pissa_start + " with " +
                    std::to_string(st.pissa_threads) + " libtorch threads on '" + st.pissa_cpu + "'; here " +
                    pissa_start_checksum() + " with " + std::to_string(at::get_num_threads()) + " on '" +
                    cpu_model_name() + "'), so it would train on another frozen base; resume with precision.threads=" +
                    std::to_string(st.pissa_threads) + " on the same kind of CPU");
  if (st.master.defined())
    weights_.restore(st.master, st.exp_avg, st.exp_avg_sq, st.optimizer_steps, st.scaler);
  else  // deferred: the buffers stay in the checkpoint's file and are read a slice at a time
    weights_.restore([&](const std::string& name, int64_t begin, int64_t n,
                         float* out) { read_checkpoint_buffer(st, name, begin, n, out); },
                     st.optimizer_steps, st.scaler);
  order_.restore(st.data_rng, st.order, st.cursor, where);
  sampling_.set_state(torch::from_blob(const_cast<uint8_t*>(st.sampling_rng.data()),
                                       {int64_t(st.sampling_rng.size())}, torch::kUInt8).clone());
  skipped_ = st.skipped_steps;
}

TrainerState GrpoTrainer::checkpoint_state(int64_t step) {
  FullOptimizerState full = weights_.gather_state();  // every rank takes part
  TrainerState st;
  st.step = step;
  st.optimizer_steps = weights_.optimizer_steps();
  st.skipped_steps = skipped_;
  st.scaler = weights_.scaler_state();
  st.data_rng = order_.rng_state();
  st.order = order_.permutation();
  st.cursor = order_.cursor();
  const torch::Tensor gen_state = sampling_.get_state();
  st.sampling_rng.assign(gen_state.data_ptr<uint8_t>(), gen_state.data_ptr<uint8_t>() + gen_state.numel());
  st.master = full.master.cpu();
  st.exp_avg = full.exp_avg.cpu();
  st.exp_avg_sq = full.exp_avg_sq.cpu();
  st.config_yaml = resolved_yaml(cfg_);
  st.compute = config::enum_name(weights_.precision().compute);
  if (pissa_start_.defined()) {
    st.pissa_start = pissa_start_checksum();
    st.pissa_threads = at::get_num_threads();
    st.pissa_cpu = cpu_model_name();
  }
  return st;
}

std::string GrpoTrainer::pissa_start_checksum() const {
  const torch::Tensor f = pissa_start_.to(torch::kFloat).contiguous();
  return checkpoint_checksum(
      std::string_view(reinterpret_cast<const char*>(f.data_ptr<float>()), std::size_t(f.numel()) * sizeof(float)));
}

}  // namespace unstuck::train
