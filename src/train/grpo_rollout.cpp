// GrpoTrainer's rollout phase: the step's prompts drawn, their groups sampled (with dynamic sampling's
// extra rounds), the completions scored by the verifiers and the reward functions' failures checked.
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
#include "train/tool_turns.h"

namespace unstuck::train {

// reward.function: the step's failures are logged (this rank's first, with its traceback), and more
// than max_error_frac of the sampled completions stops the run before the update, on every rank.
void GrpoTrainer::check_reward_errors(int64_t step, const Scores& sc, const Sampling& smp) {
  if (sc.errors > 0)
    spdlog::warn("step {}: {} completion(s) of this rank failed to score (reward_error, reward 0); the first:\n{}",
                 step, sc.errors, sc.first_error);
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

void GrpoTrainer::rollout_phase(int64_t step, Rollouts* ro, Scores* sc, Sampling* smp, Timings* time) {
  sample(step, ro, sc, smp, time);
  trace_memory("rollout");
  if (phase_end_) phase_end_("rollout");
  if (reward::scorer_can_fail(cfg_.reward, verifier_name_)) check_reward_errors(step, *sc, *smp);
  if (sc->not_applicable > 0)
    spdlog::warn(
        "step {}: every reward function returned None for {} completion(s) of this rank (not_applicable: "
        "left out of their groups' baselines, advantage 0); the first was for the prompt: {}",
        step, sc->not_applicable, sc->first_not_applicable.substr(0, 300));
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
    ro->prompts.push_back(j == 0 ? prompt_ids(*c.record, prompt_format(), ctx_.tokenizer) : ro->prompts.back());
    ro->completions.push_back(c.completions[j]);
    if (!c.tool_stats.empty()) ro->tool_stats.push_back(c.tool_stats[j]);
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
    ro.prompts.push_back(row % G == 0 ? prompt_ids(*ro.records.back(), prompt_format(), ctx_.tokenizer)
                                      : ro.prompts.back());
    keys.push_back(round * cfg_.grpo.prompts_per_step * G + row);
  }
  if (tools_ && tools_->has_environment()) start_environments(ro);
  gen_opts_.uniforms = rollout::sampling_uniforms(ctx_.seeds.sampling, step, keys, cfg_.rollout.max_new_tokens,
                                                  device_);  // (rows, T)
  gen_opts_.progress = [this](const rollout::GenerateProgress& p) {
    if (startup_ && p.tokens_done == 1) {
      startup_->mark("first rollout token");
      spdlog::info("train: start-up {}", startup_->summary());
      startup_record_ = startup_->to_json();
      startup_ = nullptr;
    }
    progress_.rollout(p);
  };
  rollout::GenerateOptions first = gen_opts_;
  if (tools_) first.contexts = std::make_shared<rollout::KeptContexts>();  // tool rounds continue each row's cache
  ro.completions = rollout::generate(weights_.model(), ro.prompts, first, sampling_);
  if (tools_) run_tools(ro, first.contexts);
  return ro;
}

// Each row as doubles (exact for rewards, token ids and FP32 log-probs): reward, correct, finish
// (0 eos, 1 length), length, then max_new_tokens token ids, as many log-probs and as many from_tool
// flags (tools.functions).
std::vector<GrpoTrainer::Candidate> GrpoTrainer::gather_groups(const std::vector<const data::TaskRecord*>& records,
                                                               const Rollouts& ro, const Scores& sc) const {
  const int64_t G = cfg_.grpo.group_size, T = cfg_.rollout.max_new_tokens;
  const std::size_t width = std::size_t(4 + 3 * T), mine = ro.completions.size();
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
      x[4 + 2 * std::size_t(T) + t] = c.from_tool.empty() ? 0 : c.from_tool[t];
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
      bool any_tool = false;
      for (std::size_t t = 0; t < n; ++t) any_tool = any_tool || x[4 + 2 * std::size_t(T) + t] != 0;
      if (any_tool) out.from_tool.resize(n);
      for (std::size_t t = 0; t < n; ++t) {
        out.tokens[t] = int32_t(x[4 + t]);
        out.logprobs[t] = float(x[4 + std::size_t(T) + t]);
        if (any_tool) out.from_tool[t] = uint8_t(x[4 + 2 * std::size_t(T) + t]);
      }
    }
  }
  if (tools_) gather_tool_stats(ro, groups);
  return groups;
}

void GrpoTrainer::gather_tool_stats(const Rollouts& ro, std::vector<Candidate>& groups) const {
  nlohmann::json mine = nlohmann::json::array();
  for (const rollout::ToolTurnStats& t : ro.tool_stats)
    mine.push_back({t.calls, t.failures, t.turns, t.tool_tokens, t.dropped, t.seconds, t.messages, t.context_tokens});
  const std::string bytes = mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::size_t world = std::size_t(comm_.world_size());
  int64_t size = int64_t(bytes.size());
  std::vector<int64_t> sizes(world);
  comm_.all_gather(&size, sizes.data(), 1, dist::DataType::i64);
  const std::size_t width = std::size_t(*std::max_element(sizes.begin(), sizes.end()));
  std::vector<uint8_t> send(width, 0), all(width * world);
  std::copy(bytes.begin(), bytes.end(), send.begin());
  comm_.all_gather(send.data(), all.data(), width, dist::DataType::u8);
  const int64_t G = cfg_.grpo.group_size;
  for (Candidate& c : groups) c.tool_stats.resize(std::size_t(G));
  for (std::size_t r = 0; r < world; ++r) {
    const char* at = reinterpret_cast<const char*>(all.data() + r * width);
    const nlohmann::json rows = nlohmann::json::parse(at, at + sizes[r]);
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const int64_t row = rows_of_[r][k];
      rollout::ToolTurnStats& t = groups[std::size_t(row / G)].tool_stats[std::size_t(row % G)];
      const nlohmann::json& x = rows[k];
      t.calls = x[0];
      t.failures = x[1];
      t.turns = x[2];
      t.tool_tokens = x[3];
      t.dropped = x[4];
      t.seconds = x[5];
      t.messages = x[6];
      t.context_tokens = x[7];
    }
  }
}

void GrpoTrainer::Scores::tally(const std::vector<rollout::Completion>& completions) {
  correct = gen_tokens = truncated = 0;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    correct += right[i];
    const auto& tool = completions[i].from_tool;  // the policy's tokens only (TRL counts them so)
    gen_tokens += double(completions[i].tokens.size()) - double(std::count(tool.begin(), tool.end(), uint8_t(1)));
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
    // With tools the answer is the last assistant turn: the policy's tokens after the last tool result.
    texts.push_back(completion_text(last_assistant_turn(c), ctx_.tokenizer, ctx_.stop_ids));
    ids.push_back(c.tokens);
  }
  reward::ScoringContext context;  // TRL's completion_ids and trainer_state
  context.completion_ids = &ids;
  std::vector<nlohmann::json> conversations;  // tools: each completion's messages, and its whole text
  std::vector<std::string> responses;
  for (const rollout::ToolTurnStats& t : ro.tool_stats) conversations.push_back(t.messages);
  if (!ro.tool_stats.empty()) {
    for (const auto& c : ro.completions) responses.push_back(ctx_.tokenizer.decode(c.tokens, true));
    context.conversations = &conversations;
    context.responses = &responses;
  }
  context.global_step = step - 1;
  context.max_steps = cfg_.grpo.steps;
  context.epoch =
      double(step - 1) * double(cfg_.grpo.prompts_per_step) / double(std::max<std::size_t>(train_.size(), 1));
  context.world_process_zero = comm_.rank() == 0;
  context.stop = stop_flag_;
  if (tools_ && tools_->has_environment()) context.environments = environment_scorer(tools_, stop_flag_);
  const std::vector<reward::RewardResult> results = verifier_->score_batch(texts, ro.records, context);
  std::vector<rollout::EnvironmentScore> owned;  // tools.environment's get_reward(), added to the reward
  if (tools_ && tools_->environment_scores()) owned = tools_->environment_rewards(n, stop_flag_);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& c = ro.completions[i];
    const reward::RewardResult& r = results[i];
    // tools.environment's get_reward(): weight 1, summed with the functions' as TRL's nansum sums
    // them (so it scores a row no function applied to); one that raised is a reward error.
    const bool owned_score = !owned.empty() && owned[i].error.empty();
    double reward = r.reward;
    if (owned_score) reward = std::isnan(reward) ? owned[i].score : reward + owned[i].score;
    if (cfg_.grpo.overlong == algo::Overlong::soft_penalty)
      reward +=
          algo::overlong_penalty(int64_t(c.tokens.size()), cfg_.rollout.max_new_tokens, cfg_.grpo.overlong_buffer);
    sc.rewards[i] = float(reward);
    sc.right[i] = r.status == reward::RewardStatus::correct;
    if (r.status == reward::RewardStatus::error) {
      if (sc.errors == 0) sc.first_error = r.error;
      ++sc.errors;
      if (reported_error_kinds_.insert(error_kind(r.error)).second)  // each kind's whole text, once a run
        spdlog::warn("step {}: a completion failed to score with a new kind of error ({}):\n{}", step,
                     error_kind(r.error), r.error);
    }
    if (!owned.empty() && !owned_score) {
      if (sc.errors == 0) sc.first_error = owned[i].error;
      ++sc.errors;
      if (reported_error_kinds_.insert(error_kind(owned[i].error)).second)
        spdlog::warn("step {}: an environment's get_reward failed:\n{}", step, owned[i].error);
    }
    if (r.status == reward::RewardStatus::not_applicable && !owned_score) {
      if (sc.not_applicable == 0) sc.first_not_applicable = ro.records[i]->prompt;
      ++sc.not_applicable;
    }
    const auto add = [&sc](const std::string& metric, double value) {
      sc.extra[metric].first += value;
      sc.extra[metric].second += 1;
    };
    if (owned_score) add("reward/" + tools_->environment_class(), owned[i].score);  // TRL logs it by class
    for (const auto& [key, value] : r.extra) add("reward_extra/" + key, value);
    if (!ro.tool_stats.empty()) {  // tools.functions: per completion, averaged over the step's
      const rollout::ToolTurnStats& t = ro.tool_stats[i];
      add("tools/calls", double(t.calls));
      add("tools/failures", double(t.failures));
      add("tools/turns", double(t.turns));
      add("tools/tool_tokens", double(t.tool_tokens));
      add("tools/dropped_results", double(t.dropped));
      add("tools/seconds", t.seconds);
      add("tools/context_tokens", double(t.context_tokens));
    }
    for (const auto& [name, value] : r.terms) add("reward/" + name, value);
    for (const auto& [name, values] : r.metrics)
      for (const double value : values) add("reward_metric/" + name, value);
  }
  sc.tally(ro.completions);
  return sc;
}

}  // namespace unstuck::train
