// GrpoTrainer's metrics: the step's sums over this rank's rows (StepSums, one all-reduce) and the
// metrics line built from them (reward, policy, scorer, step and sticking metrics).
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
        spdlog::warn(
            "reward metrics: more reward_extra/ and reward/ names than fit {} bytes; '{}' and later ones are not "
            "logged",
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

}  // namespace

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
  // Last: the largest mismatch (masked tokens count 0, below any real one's abs).
  sums.push_back(mask.numel() > 0 ? ((meas.logp - batch.old_logp).abs() * mask).max() : zero);
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
  s.logprob_mismatch_max = h[sums.size() - 1];
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
  std::vector<double> maxima(std::size_t(comm_.world_size()));
  comm_.all_gather(&s.logprob_mismatch_max, maxima.data(), 1, dist::DataType::f64);
  s.logprob_mismatch_max = *std::max_element(maxima.begin(), maxima.end());
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
  m["response_len_mean"] = s.generated_tokens / rows;  // the policy's tokens (a tool's are not its)
  m["loss_tokens_mean"] = s.tokens / rows;             // the tokens the loss reads, per completion
  m["overlong_frac"] = s.truncated / rows;             // completions cut at rollout.max_new_tokens
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
  m["logprob_mismatch_max"] = s.logprob_mismatch_max;
  if (cfg_.grpo.kl_in == algo::KlIn::reward) m["kl_reward_penalty"] = s.kl_penalty / rows;
}

void GrpoTrainer::add_scorer_metrics(MetricsLine& m, const Scores& sc, const Sampling& smp, const StepSums& s) const {
  const double rows = double(cfg_.grpo.prompts_per_step * cfg_.grpo.group_size), tokens = std::max(s.tokens, 1.0);
  // Over every completion sampled (all rounds of dynamic sampling).
  if (reward::scorer_can_fail(cfg_.reward, verifier_name_))
    m["reward_error_frac"] = s.reward_errors / (rows * double(smp.rounds));
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

}  // namespace unstuck::train
