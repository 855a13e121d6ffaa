// SFT loop: batches of (prompt, completion + EOS) with the loss on completion tokens, AdamW with
// warm-up + cosine schedule through the fused precision kernels, periodic greedy evaluation.
#include "unstuck/train/sft.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "unstuck/common/error.h"
#include "unstuck/common/parallel.h"
#include "unstuck/config/config.h"
#include "unstuck/data/dataset.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/train/evaluate.h"
#include "unstuck/config/lr_schedule.h"
#include "train/record_order.h"
#include "unstuck/train/run_plan.h"
#include "train/skip_guard.h"
#include "train/run_health.h"
#include "unstuck/train/torch_device.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {
namespace {

// Right-padded (B, L) tokens and the (B, L-1) mask of target positions that are completion tokens.
std::pair<torch::Tensor, torch::Tensor> make_batch(const std::vector<SftExample>& examples,
                                                   const std::vector<std::size_t>& idx, int32_t pad) {
  std::size_t L = 0;
  for (std::size_t i : idx) L = std::max(L, examples[i].prompt.size() + examples[i].completion.size());
  torch::Tensor tokens = torch::full({int64_t(idx.size()), int64_t(L)}, int64_t(pad), torch::kLong);
  torch::Tensor mask = torch::zeros({int64_t(idx.size()), int64_t(L) - 1}, torch::kFloat32);
  auto t = tokens.accessor<int64_t, 2>();
  auto m = mask.accessor<float, 2>();
  for (std::size_t b = 0; b < idx.size(); ++b) {
    const SftExample& e = examples[idx[b]];
    std::size_t pos = 0;
    for (int32_t id : e.prompt) t[b][pos++] = id;
    for (int32_t id : e.completion) {
      m[b][pos - 1] = 1.0f;  // predict this completion token from the previous position
      t[b][pos++] = id;
    }
  }
  return {tokens, mask};
}

io::DType save_dtype(config::SaveDtype d) {
  switch (d) {
    case config::SaveDtype::bf16:
      return io::DType::bf16;
    case config::SaveDtype::fp16:
      return io::DType::f16;
    case config::SaveDtype::fp32:
      break;
  }
  return io::DType::f32;
}

using Clock = std::chrono::steady_clock;

// One SFT step: a batch of the next records in the data order, the masked next-token loss, its
// backward and the optimizer step.
struct SftStep {
  double loss = 0.0;
  int64_t tokens = 0;  // completion tokens in the loss
  double lr = 0.0;
  OptimizerStepStats stats;
};

SftStep sft_step(TrainableWeights& weights, const RunConfig& cfg, const std::vector<SftExample>& train,
                 RecordOrder& order, int32_t pad_id, const torch::Device& device, int64_t step) {
  std::vector<std::size_t> idx;
  while (int64_t(idx.size()) < cfg.sft.batch_size) idx.push_back(order.next());
  auto [host_tokens, host_mask] = make_batch(train, idx, pad_id);
  const torch::Tensor tokens = host_tokens.to(device), mask = host_mask.to(device);
  const int64_t L = tokens.size(1);
  const torch::Tensor logits = weights.model().forward(tokens.narrow(1, 0, L - 1));  // (B, L-1, V)
  const torch::Tensor nll = torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), tokens.narrow(1, 1, L - 1).reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const torch::Tensor loss = (nll * mask.reshape({-1})).sum() / mask.sum();
  (loss * weights.loss_scale()).backward();
  weights.accumulate_grads();
  SftStep r;
  r.lr = cfg.sft.lr.lr_at(cfg.optim.lr, step, cfg.sft.steps);
  r.stats = weights.optimizer_step(cfg.optim, r.lr);
  r.loss = loss.item<double>();
  r.tokens = int64_t(host_mask.sum().item<double>());
  return r;
}

// The progress line and metrics row of every sft.log_every steps (and the last): the window's mean
// loss and tokens/s, the run's elapsed time and ETA.
class SftProgress {
 public:
  SftProgress(const config::SftConfig& sft, std::ofstream& metrics, Clock::time_point start)
      : sft_(sft), metrics_(metrics), start_(start) {}

  void observe(int64_t step, const SftStep& s) {
    loss_sum_ += s.loss;
    tokens_ += s.tokens;
    if (step % sft_.log_every != 0 && step != sft_.steps) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double window = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    const int64_t n = step % sft_.log_every == 0 ? sft_.log_every : step % sft_.log_every;
    const double eta = elapsed / double(step) * double(sft_.steps - step);
    const OptimizerStepStats& st = s.stats;
    spdlog::info(
        "sft step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | changed {:.3f} | "
        "{:.0f} tok/s | {:.0f}s elapsed, ETA {:.0f}s",
        step, sft_.steps, loss_sum_ / double(n), s.lr, st.grad_norm,
        st.elements ? double(st.changed) / double(st.elements) : 0.0, double(tokens_) / std::max(window, 1e-9), elapsed,
        eta);
    metrics_ << nlohmann::json{{"step", step},
                               {"loss", loss_sum_ / double(n)},
                               {"lr", s.lr},
                               {"grad_norm", st.grad_norm},
                               {"skipped", st.skipped},
                               {"loss_scale", st.loss_scale}}
                    .dump()
             << "\n";
    metrics_.flush();
    loss_sum_ = 0.0;
    tokens_ = 0;
  }

 private:
  const config::SftConfig& sft_;
  std::ofstream& metrics_;
  Clock::time_point start_, last_ = Clock::now();
  double loss_sum_ = 0.0;
  int64_t tokens_ = 0;
};

// The trained model written with its tokenizer and config, the health summary, sft_result.json.
SftResult finish_sft(const RunPlan& plan, const TrainableWeights& weights, RunHealth& health, double accuracy,
                     Clock::time_point t_start) {
  const RunConfig& cfg = plan.config;
  const RunContext& ctx = plan.ctx;
  const tokenizer::Tokenizer& tok = ctx.tokenizer;
  SftResult result;
  result.model_dir = plan.sft_model_dir;
  const model::SpecialTokens special{tok.bos_id(), tok.eos_id(), tok.pad_id(), {}};
  model::save_pretrained(result.model_dir, cfg.model, weights.master(), save_dtype(cfg.sft.save_dtype), special);
  tokenizer::copy_tokenizer_files(ctx.tokenizer_path, result.model_dir);
  std::filesystem::copy_file(ctx.run_dir / "config.yaml", result.model_dir / kRunConfigFile,
                             std::filesystem::copy_options::overwrite_existing);
  result.accuracy = accuracy;
  result.steps = cfg.sft.steps;
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  health.end_of_run();
  result.health_summary = health.summary();
  result.health_failed = health.failed();
  if (health.warnings().empty() && !health.failed())
    spdlog::info("{}", result.health_summary);
  else
    spdlog::warn("{}", result.health_summary);
  record_in_run_json(ctx, {{"health", health.to_json()}});
  io::write_json_file(result.model_dir / "sft_result.json", {{"greedy_test_accuracy", result.accuracy},
                                                             {"eval_records", plan.test.kept.size()},
                                                             {"steps", result.steps},
                                                             {"seconds", result.seconds}});
  spdlog::info("sft done in {:.0f}s: greedy test accuracy {:.3f}; model written to {}", result.seconds, result.accuracy,
               result.model_dir.string());
  return result;
}

}  // namespace

SftResult run_sft(RunConfig config) {
  const auto t_start = Clock::now();
  // Resolve and check everything first (a missing GPU, an unwritable model directory, overlong
  // records), writing nothing; then open the run directory.
  const std::unique_ptr<dist::Communicator> comm = dist::make_single_process_communicator();
  RunRequest request;
  request.command = "sft";
  RunPlan plan = plan_run(std::move(config), request, *comm);
  open_run(plan);
  const RunConfig& cfg = plan.config;
  const RunContext& ctx = plan.ctx;
  const torch::Device device = torch_device(plan.device);
  const std::vector<SftExample>& train = plan.sft_examples;
  const std::vector<data::TaskRecord>& test_records = plan.test.kept;
  spdlog::info("sft: {} train / {} eval records, model {} params, precision {}, device {}", train.size(),
               test_records.size(), model::llama_layout(cfg.model).total, config::enum_name(cfg.precision.mode),
               device.str());

  const model::ParamLayout layout = model::llama_layout(cfg.model);
  torch::Tensor master = torch::empty({layout.total});
  model::init_llama_weights(layout, cfg.model, master, ctx.seeds.init);  // on the CPU: the same start anywhere
  if (cfg.precision.offload == precision::Offload::none) master = master.to(device);  // offloaded: stays on the host
  TrainableWeights weights(cfg.model, master, with_compute(cfg.precision, plan.compute), ctx.seeds.rounding, nullptr,
                           {}, device);
  if (c10::toString(weights.forward_dtype()) != plan.decisions.forward_dtype)
    throw std::logic_error(std::string("sft: the weights compute in ") + c10::toString(weights.forward_dtype()) +
                           ", the plan decided " + plan.decisions.forward_dtype);
  const auto verifier =
      reward::make_verifier(reward::verifier_name(cfg.reward, config::enum_name(cfg.data.task)), cfg.reward);
  EvalOptions eval_opts;
  eval_opts.max_new_tokens = cfg.rollout.max_new_tokens;
  eval_opts.stop_ids = ctx.stop_ids;  // the EOS, which ends the completions it trains on

  RecordOrder order(train.size(), ctx.seeds.data);
  std::ofstream metrics(ctx.run_dir / "sft_metrics.jsonl");
  double accuracy = 0.0;
  SkipGuard skip_guard(cfg, "sft");
  HealthThresholds thresholds;
  thresholds.loss_must_fall = true;
  RunHealth health(1, cfg.sft.steps, 0, thresholds, "sft");
  SftProgress progress(cfg.sft, metrics, t_start);
  int64_t skipped_steps = 0;
  for (int64_t step = 1; step <= cfg.sft.steps; ++step) {
    const SftStep s = sft_step(weights, cfg, train, order, ctx.tokenizer.pad_id(), device, step);
    skip_guard.record(step, s.stats.skipped, s.stats.loss_scale, s.lr);
    skipped_steps += s.stats.skipped ? 1 : 0;
    health.observe({{"step", step}, {"loss", s.loss}, {"skipped_steps", skipped_steps}});
    if (step == cfg.sft.steps || (cfg.sft.eval_every > 0 && step % cfg.sft.eval_every == 0)) {
      const EvalResult ev = evaluate(weights.model(), ctx.tokenizer, test_records, ctx.prompts, *verifier, eval_opts);
      accuracy = ev.accuracy;
      spdlog::info("sft step {}/{}: greedy test accuracy {:.3f} ({} records); e.g. {}", step, cfg.sft.steps,
                   ev.accuracy, ev.records, ev.examples.empty() ? "" : ev.examples[0]);
      metrics
          << nlohmann::json{{"step", step}, {"eval_accuracy", ev.accuracy}, {"eval_mean_reward", ev.mean_reward}}.dump()
          << "\n";
    }
    progress.observe(step, s);
  }
  return finish_sft(plan, weights, health, accuracy, t_start);
}

}  // namespace unstuck::train
