// GRPO loop, one rollout batch per iteration, reading like the data flow of DESIGN.md:
// rollout -> reward -> advantage -> update (fused AdamW rounds the compute weights) -> metrics.
// Data parallel over the ranks of a communicator: each rank rolls out its share of the prompts
// (whole groups), the optimizer state is sharded (TrainableWeights), metrics are reduced before
// rank 0 logs them, and rank 0 writes the checkpoints of the gathered state.
#include "unstuck/train/grpo.h"
#include "unstuck/train/model_export.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <fstream>
#include <optional>

#include "unstuck/algo/advantages.h"
#include "unstuck/algo/policy_loss.h"
#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/data/dataset.h"
#include "unstuck/dist/data_parallel.h"
#include "unstuck/io/json_file.h"
#include "unstuck/log/tensorboard.h"
#include "unstuck/model/model_io.h"
#include "unstuck/rollout/sampler.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/evaluate.h"
#include "unstuck/train/record_order.h"
#include "unstuck/train/run_setup.h"
#include "unstuck/train/sft.h"
#include "unstuck/train/skip_guard.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {
namespace {

using Json = nlohmann::ordered_json;

// A rollout batch as tensors: N = prompts x group sequences of P (left-padded) prompt tokens and T
// completion tokens.
struct RolloutBatch {
  torch::Tensor tokens;    // (N, P + T) int64
  torch::Tensor valid;     // (N, P + T) bool: real prompt tokens and every completion slot
  torch::Tensor mask;      // (N, T) float: 1 on sampled completion tokens
  torch::Tensor old_logp;  // (N, T) sampling log-probs
  int64_t prompt_len = 0;
};

RolloutBatch make_rollout_batch(const std::vector<std::vector<int32_t>>& prompts,
                                const std::vector<rollout::Completion>& outs, int32_t pad) {
  const int64_t N = int64_t(prompts.size());
  int64_t P = 0, T = 1;
  for (const auto& p : prompts) P = std::max<int64_t>(P, int64_t(p.size()));
  for (const auto& c : outs) T = std::max<int64_t>(T, int64_t(c.tokens.size()));
  RolloutBatch b;
  b.prompt_len = P;
  b.tokens = torch::full({N, P + T}, int64_t(pad), torch::kLong);
  b.valid = torch::zeros({N, P + T}, torch::kBool);
  b.mask = torch::zeros({N, T});
  b.old_logp = torch::zeros({N, T});
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto val = b.valid.accessor<bool, 2>();
  auto msk = b.mask.accessor<float, 2>();
  auto olp = b.old_logp.accessor<float, 2>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t start = P - int64_t(prompts[n].size());
    for (std::size_t i = 0; i < prompts[n].size(); ++i) {
      tok[n][start + int64_t(i)] = prompts[n][i];
      val[n][start + int64_t(i)] = true;
    }
    for (int64_t t = 0; t < T; ++t) val[n][P + t] = true;
    for (std::size_t t = 0; t < outs[n].tokens.size(); ++t) {
      tok[n][P + int64_t(t)] = outs[n].tokens[t];
      msk[n][int64_t(t)] = 1.0f;
      olp[n][int64_t(t)] = outs[n].logprobs[t];
    }
  }
  return b;
}

// Log-softmax over the vocabulary at the positions that predict the completion tokens: (N, T, V).
torch::Tensor completion_log_probs(const model::LlamaModel& m, const RolloutBatch& b,
                                   const torch::Tensor& rows) {
  const torch::Tensor tokens = b.tokens.index_select(0, rows);
  const torch::Tensor valid = b.valid.index_select(0, rows);
  const int64_t L = tokens.size(1), T = L - b.prompt_len;
  const torch::Tensor logits = m.forward(tokens.narrow(1, 0, L - 1), valid.narrow(1, 0, L - 1));
  return torch::log_softmax(logits.narrow(1, b.prompt_len - 1, T), -1);
}

torch::Tensor gather_tokens(const torch::Tensor& logp_all, const RolloutBatch& b, const torch::Tensor& rows) {
  const torch::Tensor targets = b.tokens.index_select(0, rows).narrow(1, b.prompt_len, logp_all.size(1));
  return logp_all.gather(2, targets.unsqueeze(2)).squeeze(2);  // (N, T)
}

// Set by SIGINT/SIGTERM; the loop finishes its step, checkpoints and returns. A signal handler can
// only reach static storage, so this flag is the one global of the trainer.
std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested = true; }

// Installs the stop handlers for the lifetime of a run and restores the previous ones after.
class StopSignals {
 public:
  StopSignals() {
    g_stop_requested = false;
    prev_int_ = std::signal(SIGINT, request_stop);
    prev_term_ = std::signal(SIGTERM, request_stop);
  }
  ~StopSignals() {
    std::signal(SIGINT, prev_int_);
    std::signal(SIGTERM, prev_term_);
  }

 private:
  void (*prev_int_)(int);
  void (*prev_term_)(int);
};

// Keeps the metrics lines of steps <= `last_step` (a resumed run rewrites what came after). A torn
// last line (the run was killed while writing it) is dropped with a warning; a bad line elsewhere is
// an error naming file and line. Returns the first kept line's reward_mean (0 when none).
double truncate_metrics(const std::filesystem::path& path, int64_t last_step) {
  std::vector<std::string> lines, keep;
  std::ifstream in(path);
  long long number = 0;
  for (std::string line; io::read_capped_line(in, line, io::kMaxJsonlLineBytes, path.string(), number);)
    lines.push_back(line);
  in.close();
  double first_reward = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const std::string where = path.string() + ":" + std::to_string(i + 1);
    nlohmann::json m;
    try {
      m = io::parse_json(lines[i], where);
    } catch (const UserError& e) {
      if (i + 1 != lines.size()) throw;
      spdlog::warn("train: dropping the torn last line of {} (the run was stopped while writing it): {}",
                   path.string(), e.what());
      continue;
    }
    if (!m.is_object() || !m.contains("step") || !m["step"].is_number_integer())
      throw UserError(where + ": expected a metrics object with an integer \"step\"");
    if (m["step"].get<int64_t>() > last_step) continue;
    if (keep.empty() && m.contains("reward_mean") && m["reward_mean"].is_number())
      first_reward = m["reward_mean"].get<double>();
    keep.push_back(lines[i]);
  }
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : keep) out << l << "\n";
  return first_reward;
}

double masked_sum(const torch::Tensor& x, const torch::Tensor& mask) { return (x * mask).sum().item<double>(); }

// Per-step sums of this rank's rollouts, summed over ranks by one all-reduce before logging.
struct StepSums {
  double correct = 0, gen_tokens = 0, zero_var_groups = 0, groups = 0;
  double kl_k3 = 0, kl_exact = 0, entropy = 0, mismatch = 0, tokens = 0;  // over completion tokens
  std::vector<double> clipped, update_tokens;  // per optimizer step: clipped tokens, tokens

  void reduce(dist::Communicator& comm) {
    std::vector<double> v{correct, gen_tokens, zero_var_groups, groups, kl_k3, kl_exact, entropy, mismatch, tokens};
    v.insert(v.end(), clipped.begin(), clipped.end());
    v.insert(v.end(), update_tokens.begin(), update_tokens.end());
    comm.all_reduce_sum(v.data(), v.size());
    double* fields[] = {&correct, &gen_tokens, &zero_var_groups, &groups, &kl_k3, &kl_exact, &entropy, &mismatch, &tokens};
    for (std::size_t i = 0; i < 9; ++i) *fields[i] = v[i];
    std::copy(v.begin() + 9, v.begin() + 9 + long(clipped.size()), clipped.begin());
    std::copy(v.begin() + 9 + long(clipped.size()), v.end(), update_tokens.begin());
  }
  double mean(double sum) const { return sum / std::max(tokens, 1.0); }
};

}  // namespace

std::filesystem::path resolve_resume_checkpoint(const std::filesystem::path& path) {
  if (std::filesystem::exists(path / "manifest.json")) return path;
  const std::filesystem::path latest = latest_checkpoint(path / "checkpoints");
  if (latest.empty())
    throw UserError("nothing to resume in '" + path.string() +
                    "': no checkpoint (expected <run dir>/checkpoints/step_N/manifest.json)");
  return latest;
}

GrpoResult run_grpo(RunConfig cfg, const std::filesystem::path& resume, dist::Communicator* comm_in) {
  const StopSignals stop_signals;
  const std::unique_ptr<dist::Communicator> own_comm = comm_in ? nullptr : dist::make_single_process_communicator();
  dist::Communicator& comm = comm_in ? *comm_in : *own_comm;
  const int rank = comm.rank(), world = comm.world_size();
  const bool lead = rank == 0;  // writes metrics, TensorBoard events and checkpoints
  // The base policy fixes the model shape and the tokenizer.
  const std::filesystem::path base = cfg.grpo.base_model;
  if (base.empty() || !std::filesystem::is_directory(base))
    throw UserError("grpo.base_model must be a policy directory (an `unstuck sft` output), got '" + base.string() +
                    "'" + (base.empty() ? "" : " which is not a directory"));
  model::LoadedModel loaded = model::load_pretrained(base);
  const bool activation_checkpointing = cfg.model.activation_checkpointing;  // a training choice, not the model's
  cfg.model = loaded.config;
  cfg.model.activation_checkpointing = activation_checkpointing;
  if (cfg.tokenizer.path.empty()) cfg.tokenizer.path = base.string();  // tokenizer.json or tokenizer.model
  // Everything that can fail before training fails here, before the run directory is touched:
  // the config, the data (prompts longer than max_seq_len - max_new_tokens are dropped and counted),
  // the checkpoint to resume (contents checked against this model and data).
  RunContext ctx = prepare_run(cfg, "train", /*model_from_checkpoint=*/true);
  const int64_t max_prompt = cfg.model.max_seq_len - cfg.rollout.max_new_tokens;
  PromptFit train_fit = fit_prompts(data::read_dataset(data::train_file(cfg.data), cfg.data), ctx.prompts,
                                    ctx.tokenizer, max_prompt);
  PromptFit test_fit = fit_prompts(data::read_dataset(data::test_file(cfg.data), cfg.data), ctx.prompts,
                                   ctx.tokenizer, max_prompt);
  if (train_fit.lengths.empty()) throw UserError(data::train_file(cfg.data).string() + ": no training records");
  const auto report_fits = [&] {  // logged once the run's log file is open; throws when none is left
    report_prompt_fit(train_fit, max_prompt, "train: training records");
    report_prompt_fit(test_fit, max_prompt, "train: test records");
  };
  if (train_fit.kept.empty() || test_fit.kept.empty()) report_fits();
  const std::vector<data::TaskRecord>& train = train_fit.kept;
  std::vector<data::TaskRecord>& test = test_fit.kept;
  std::optional<TrainerState> resumed;
  std::filesystem::path ckpt;
  if (!resume.empty()) {
    ckpt = resolve_resume_checkpoint(resume);
    resumed = load_checkpoint(ckpt);
    check_checkpoint_fits(*resumed, model::llama_layout(cfg.model).total, train.size(), ckpt);
  }
  open_run(ctx, cfg, "train", rank);
  report_fits();
  // Global rows (prompt x completion) of each rank's share of a rollout batch.
  std::vector<std::vector<int64_t>> rows_of(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    rows_of[std::size_t(r)] =
        dist::rank_rows(cfg.grpo.prompts_per_step, cfg.grpo.minibatches, cfg.grpo.group_size, world, r);
  const std::vector<int64_t>& my_rows = rows_of[std::size_t(rank)];
  const tokenizer::Tokenizer& tok = ctx.tokenizer;
  torch::Tensor master = loaded.flat;
  if (cfg.grpo.round_base_to_bf16) master = master.to(torch::kBFloat16).to(torch::kFloat32);
  const torch::Tensor start_master = master.clone();
  TrainableWeights weights(cfg.model, master.clone(), cfg.precision, ctx.seeds.rounding, &comm);
  const model::LlamaModel reference(cfg.model, start_master.clone());  // frozen, FP32
  const torch::Tensor start_compute = weights.compute().clone();
  if (lead) {  // record the precision actually used
    nlohmann::json run = io::read_json_file(ctx.run_dir / "run.json");
    run["compute_weights_dtype"] = c10::toString(weights.compute().scalar_type());
    run["forward_dtype"] = c10::toString(weights.forward_dtype());
    run["world_size"] = world;
    run["dist_backend"] = comm.backend_name();
    io::write_json_file(ctx.run_dir / "run.json", run);
  }

  if (cfg.grpo.eval_samples > 0 && int64_t(test.size()) > cfg.grpo.eval_samples) test.resize(std::size_t(cfg.grpo.eval_samples));
  const auto [test_begin, test_end] = dist::rank_range(int64_t(test.size()), world, rank);
  const std::vector<data::TaskRecord> my_test(test.begin() + test_begin, test.begin() + test_end);
  const auto verifier = reward::make_verifier(reward::verifier_name(cfg.reward, config::enum_name(cfg.data.task)), cfg.reward);
  spdlog::info("train: GRPO from {} ({} params), {} x {} rollouts per step, precision {} (forward {}), {} steps, "
               "{} rank(s) ({})",
               base.string(), weights.layout().total, cfg.grpo.prompts_per_step, cfg.grpo.group_size,
               config::enum_name(cfg.precision.mode), c10::toString(weights.forward_dtype()), cfg.grpo.steps,
               world, comm.backend_name());

  RecordOrder order(train.size(), ctx.seeds.data);
  // Rollouts draw counter-based uniforms (rollout::sampling_uniforms); this generator is never
  // advanced by training and stays in checkpoints (rng.bin) only for their format.
  at::Generator sampling = at::make_generator<at::CPUGeneratorImpl>(ctx.seeds.sampling);
  rollout::GenerateOptions gen_opts;
  gen_opts.sampling = cfg.rollout;
  gen_opts.eos_id = tok.eos_id();
  gen_opts.pad_id = tok.pad_id();
  algo::PolicyLossOptions loss_opts;
  loss_opts.clip_low = cfg.grpo.clip_low;
  loss_opts.clip_high = cfg.grpo.clip_high;
  loss_opts.aggregation = cfg.grpo.loss_aggregation;
  loss_opts.max_new_tokens = cfg.rollout.max_new_tokens;
  loss_opts.kl_coef = cfg.grpo.kl_coef;
  loss_opts.kl_estimator = cfg.grpo.kl_estimator;
  loss_opts.entropy_coef = cfg.grpo.entropy_coef;
  EvalOptions eval_opts;
  eval_opts.max_new_tokens = cfg.rollout.max_new_tokens;
  const int64_t total_opt_steps = cfg.grpo.steps * cfg.grpo.minibatches * cfg.grpo.ppo_epochs;

  GrpoResult result;
  result.run_dir = ctx.run_dir;
  int64_t skipped = 0;
  int64_t first_step = 1;
  const std::filesystem::path metrics_path = ctx.run_dir / "metrics.jsonl";
  if (resume.empty() && !latest_checkpoint(ctx.run_dir / "checkpoints").empty())
    throw UserError("run directory " + ctx.run_dir.string() +
                    " already holds checkpoints of an earlier run; continue it with `unstuck train --resume " +
                    ctx.run_dir.string() + "` or pick another run.name");
  if (resumed) {
    const TrainerState& st = *resumed;
    weights.restore(st.master, st.exp_avg, st.exp_avg_sq, st.optimizer_steps, st.scaler);
    order.restore(st.data_rng, st.order, st.cursor, "checkpoint " + ckpt.string());
    sampling.set_state(torch::from_blob(const_cast<uint8_t*>(st.sampling_rng.data()),
                                        {int64_t(st.sampling_rng.size())}, torch::kUInt8).clone());
    skipped = st.skipped_steps;
    first_step = st.step + 1;
    if (lead) result.first_reward_mean = truncate_metrics(metrics_path, st.step);
    spdlog::info("train: resumed from {} at step {}", ckpt.string(), st.step);
  }
  std::ofstream metrics_file;
  std::optional<TensorBoardWriter> tensorboard;
  if (lead) {
    metrics_file.open(metrics_path, resume.empty() ? std::ios::trunc : std::ios::app);
    tensorboard.emplace(ctx.run_dir);
  }
  const auto save = [&](int64_t step) {
    FullOptimizerState full = weights.gather_state();  // every rank takes part; rank 0 writes
    if (!lead) return;
    TrainerState st;
    st.step = step;
    st.optimizer_steps = weights.optimizer_steps();
    st.skipped_steps = skipped;
    st.scaler = weights.scaler_state();
    st.data_rng = order.rng_state();
    st.order = order.permutation();
    st.cursor = order.cursor();
    const torch::Tensor gen_state = sampling.get_state();
    st.sampling_rng.assign(gen_state.data_ptr<uint8_t>(), gen_state.data_ptr<uint8_t>() + gen_state.numel());
    st.master = full.master;
    st.exp_avg = full.exp_avg;
    st.exp_avg_sq = full.exp_avg_sq;
    st.config_yaml = resolved_yaml(cfg);
    const auto dir = save_checkpoint(ctx.run_dir / "checkpoints", st, int(cfg.grpo.keep_checkpoints));
    spdlog::info("train: checkpoint {}", dir.string());
  };
  const auto t_run = std::chrono::steady_clock::now();
  SkipGuard skip_guard(cfg, "train");
  const int64_t G = cfg.grpo.group_size, N_global = cfg.grpo.prompts_per_step * G;
  for (int64_t step = first_step; step <= cfg.grpo.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const dist::CommStats comm_before = comm.stats();
    // ---- rollout: G completions per prompt of this rank's share, from the current compute weights.
    // Every rank draws the records of the whole batch (same stream on all ranks) and keeps its rows;
    // the sampling uniforms are keyed by (seed, step, global row, token), so the samples do not
    // depend on the world size, and a checkpoint needs only the step to continue them.
    std::vector<const data::TaskRecord*> step_records, records;
    for (int64_t p = 0; p < cfg.grpo.prompts_per_step; ++p) step_records.push_back(&train[order.next()]);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t row : my_rows) {
      records.push_back(step_records[std::size_t(row / G)]);
      // A prompt's G rows are consecutive, starting with completion 0: tokenize it once.
      prompts.push_back(row % G == 0 ? prompt_ids(*records.back(), ctx.prompts, tok) : prompts.back());
    }
    gen_opts.uniforms = rollout::sampling_uniforms(ctx.seeds.sampling, step, my_rows, cfg.rollout.max_new_tokens,
                                                   weights.compute().device());  // (rows, T)
    const std::vector<rollout::Completion> outs = rollout::generate(weights.model(), prompts, gen_opts, sampling);
    const double rollout_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // ---- reward and group advantages
    const auto t_reward = std::chrono::steady_clock::now();
    std::vector<float> rewards(outs.size());
    int64_t correct = 0, gen_tokens = 0;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const reward::RewardResult r = verifier->score(completion_text(outs[i].tokens, tok), *records[i]);
      rewards[i] = float(r.reward);
      correct += r.status == reward::RewardStatus::correct;
      gen_tokens += int64_t(outs[i].tokens.size());
    }
    const double reward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_reward).count();
    const algo::Advantages adv = algo::group_advantages(rewards, cfg.grpo.group_size, cfg.grpo.advantage);
    const RolloutBatch batch = make_rollout_batch(prompts, outs, tok.pad_id());
    const torch::Tensor advantages = torch::tensor(adv.values);

    // ---- measurements on the rollout batch before the update (same weights as sampling)
    const int64_t N = int64_t(outs.size());
    const torch::Tensor all_rows = torch::arange(N, torch::kLong);
    // Sums over this rank's completion tokens, reduced across ranks with the other metrics below.
    StepSums sums;
    sums.correct = double(correct);
    sums.gen_tokens = double(gen_tokens);
    sums.zero_var_groups = double(adv.zero_variance_groups);
    sums.groups = double(adv.groups);
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor lp = completion_log_probs(weights.model(), batch, all_rows);
      const torch::Tensor ref_lp = completion_log_probs(reference, batch, all_rows);
      const torch::Tensor lp_tok = gather_tokens(lp, batch, all_rows), ref_tok = gather_tokens(ref_lp, batch, all_rows);
      sums.kl_k3 = masked_sum(algo::kl_estimate(lp_tok, ref_tok, algo::KlEstimator::k3), batch.mask);
      sums.kl_exact = masked_sum((lp.exp() * (lp - ref_lp)).sum(-1), batch.mask);
      sums.entropy = masked_sum(-(lp.exp() * lp).sum(-1), batch.mask);
      sums.mismatch = masked_sum((lp_tok - batch.old_logp).abs(), batch.mask);
      sums.tokens = batch.mask.sum().item<double>();
    }

    // ---- policy update: minibatches x epochs, one optimizer step per minibatch
    const auto t_update = std::chrono::steady_clock::now();
    double grad_norm = 0, lr = 0, loss_scale = 1, optimizer_s = 0;
    OptimizerStepStats last;
    int64_t updates = 0;
    const torch::Tensor compute_before = weights.compute().clone();
    for (int64_t epoch = 0; epoch < cfg.grpo.ppo_epochs; ++epoch)
      for (int64_t mb = 0; mb < cfg.grpo.minibatches; ++mb) {
        const int64_t begin = N * mb / cfg.grpo.minibatches, end = N * (mb + 1) / cfg.grpo.minibatches;
        const torch::Tensor rows = torch::arange(begin, end, torch::kLong);
        const torch::Tensor lp_all = completion_log_probs(weights.model(), batch, rows);
        const torch::Tensor lp = gather_tokens(lp_all, batch, rows);
        const torch::Tensor mask = batch.mask.index_select(0, rows);
        torch::Tensor ref, ent;
        if (cfg.grpo.kl_coef > 0) {
          torch::NoGradGuard no_grad;
          ref = gather_tokens(completion_log_probs(reference, batch, rows), batch, rows);
        }
        if (cfg.grpo.entropy_coef > 0) ent = -(lp_all.exp() * lp_all).sum(-1);
        // The loss is normalized by the whole minibatch's tokens (or sequences) across ranks.
        double counts[2] = {mask.sum().item<double>(), double(end - begin)};
        if (world > 1) {
          comm.all_reduce_sum(counts, 2);
          loss_opts.normalizer = cfg.grpo.loss_aggregation == algo::LossAggregation::token_mean
                                     ? std::max(counts[0], 1.0) : counts[1];
        }
        const algo::PolicyLoss pl = algo::policy_loss(lp, batch.old_logp.index_select(0, rows),
                                                      advantages.index_select(0, rows), mask, ref, ent, loss_opts);
        (pl.loss * weights.loss_scale()).backward();
        weights.accumulate_grads();
        lr = scheduled_lr(cfg.grpo.lr_schedule, cfg.optim.lr, weights.optimizer_steps() + 1, total_opt_steps,
                          cfg.grpo.warmup_steps, 0.1);
        const auto t_opt = std::chrono::steady_clock::now();
        last = weights.optimizer_step(cfg.optim, lr);
        optimizer_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_opt).count();
        skipped += last.skipped;
        skip_guard.record(step, last.skipped, last.loss_scale, lr);
        sums.clipped.push_back(pl.clip_frac * std::max(mask.sum().item<double>(), 1.0));
        sums.update_tokens.push_back(std::max(mask.sum().item<double>(), 1.0));
        grad_norm += last.grad_norm;
        loss_scale = last.loss_scale;
        ++updates;
      }
    grad_norm /= double(updates);
    const double update_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_update).count();

    // ---- metrics, reduced across ranks
    sums.reduce(comm);
    std::vector<float> gathered(static_cast<std::size_t>(N_global)), all_rewards(gathered.size());
    comm.all_gather(rewards.data(), gathered.data(), rewards.size(), dist::DataType::f32);
    for (std::size_t r = 0, k = 0; r < rows_of.size(); ++r)  // back into global row order
      for (int64_t row : rows_of[r]) all_rewards[std::size_t(row)] = gathered[k++];
    double clip_frac = 0;
    for (std::size_t u = 0; u < sums.clipped.size(); ++u) clip_frac += sums.clipped[u] / sums.update_tokens[u];
    clip_frac /= double(updates);
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const torch::Tensor r = torch::tensor(all_rewards);
    const torch::Tensor after = weights.compute();
    const auto as_float = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
    const double total = double(weights.layout().total);
    Json m;
    m["step"] = step;
    m["reward_mean"] = r.mean().item<double>();
    m["reward_std"] = r.std().item<double>();
    m["accuracy"] = sums.correct / double(N_global);
    m["kl_ref_k3"] = sums.mean(sums.kl_k3);
    m["kl_ref_exact"] = sums.mean(sums.kl_exact);
    m["entropy"] = sums.mean(sums.entropy);
    m["response_len_mean"] = sums.gen_tokens / double(N_global);
    m["clip_frac"] = clip_frac;
    m["grad_norm"] = grad_norm;
    m["lr"] = lr;
    m["loss_scale"] = loss_scale;
    m["skipped_steps"] = skipped;
    m["sticking_frac"] = last.elements ? 1.0 - double(last.changed) / double(last.elements) : 0.0;
    m["update_ratio"] = (as_float(after) - as_float(compute_before)).norm().item<double>() /
                        std::max(as_float(compute_before).norm().item<double>(), 1e-30);
    m["logprob_mismatch"] = sums.mean(sums.mismatch);
    m["zero_adv_frac"] = sums.zero_var_groups / std::max(1.0, sums.groups);
    m["tokens_per_s"] = sums.gen_tokens / std::max(rollout_s, 1e-9);
    m["step_seconds"] = step_s;
    m["rollout_seconds"] = rollout_s;
    m["reward_seconds"] = reward_s;
    m["forward_backward_seconds"] = update_s - optimizer_s;
    m["optimizer_seconds"] = optimizer_s;
    m["collective_seconds"] = comm.stats().seconds - comm_before.seconds;
    m["collective_bytes"] = double(comm.stats().bytes - comm_before.bytes);
    m["changed_from_start_frac"] = (after != start_compute).sum().item<double>() / total;
    Json per_layer = Json::object();
    for (std::size_t i = 0; i < weights.layout().entries.size() && i < last.changed_per_tensor.size(); ++i) {
      const auto& e = weights.layout().entries[i];
      per_layer[e.name] = 1.0 - double(last.changed_per_tensor[i]) / double(std::max<int64_t>(1, e.numel));
    }
    m["sticking_frac_per_tensor"] = per_layer;
    const bool eval_now = step == cfg.grpo.steps || (cfg.grpo.eval_every > 0 && step % cfg.grpo.eval_every == 0);
    if (eval_now) {
      // Each rank scores its share of the test records.
      double correct_records[2] = {0, double(my_test.size())};
      if (!my_test.empty())
        correct_records[0] = evaluate(weights.model(), tok, my_test, ctx.prompts, *verifier, eval_opts).accuracy *
                             double(my_test.size());
      comm.all_reduce_sum(correct_records, 2);
      m["eval_accuracy"] = correct_records[0] / std::max(correct_records[1], 1.0);
      result.final_eval_accuracy = m["eval_accuracy"].get<double>();
    }
    if (lead) {
      metrics_file << m.dump() << "\n";
      metrics_file.flush();
    }
    std::vector<std::pair<std::string, double>> scalars;
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it.value().is_number() && it.key() != "step") scalars.emplace_back(it.key(), it.value().get<double>());
    for (auto it = per_layer.begin(); it != per_layer.end(); ++it)
      scalars.emplace_back("sticking_frac/" + it.key(), it.value().get<double>());
    if (lead) tensorboard->add_scalars(step, scalars);
    if (step == 1) result.first_reward_mean = m["reward_mean"].get<double>();
    result.last_reward_mean = m["reward_mean"].get<double>();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_run).count();
    const int64_t done = step * 20 / cfg.grpo.steps;
    spdlog::info("[{}{}] step {:>4}/{} | reward {:.3f} | acc {:.3f}{} | kl {:.2e} | sticking {:.3f} | clip {:.3f} | "
                 "{:.1f}s/step, ETA {:.0f}s",
                 std::string(std::size_t(done), '#'), std::string(std::size_t(20 - done), '.'), step,
                 cfg.grpo.steps, m["reward_mean"].get<double>(), m["accuracy"].get<double>(),
                 eval_now ? fmt::format(" | eval {:.3f}", m["eval_accuracy"].get<double>()) : std::string(),
                 m["kl_ref_k3"].get<double>(), m["sticking_frac"].get<double>(), clip_frac, step_s,
                 elapsed / double(step - first_step + 1) * double(cfg.grpo.steps - step));
    const bool last_step = step == cfg.grpo.steps;
    const bool stop = comm.any(g_stop_requested);  // every rank stops after the same step
    if (last_step || stop ||
        (cfg.grpo.checkpoint_every > 0 && step % cfg.grpo.checkpoint_every == 0))
      save(step);
    if (stop && !last_step) {
      spdlog::warn("train: stopped by signal after step {}; resume with `unstuck train --resume {}`", step,
                   ctx.run_dir.string());
      result.steps = step;
      result.interrupted = true;
      return result;
    }
  }
  result.steps = cfg.grpo.steps;
  if (lead && cfg.grpo.final_model) write_final_model(ctx.run_dir, cfg, weights.compute());
  return result;
}

}  // namespace unstuck::train
