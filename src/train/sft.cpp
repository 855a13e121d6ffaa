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
#include "unstuck/train/lr_schedule.h"
#include "unstuck/train/record_order.h"
#include "unstuck/train/run_plan.h"
#include "unstuck/train/skip_guard.h"
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

io::DType save_dtype(SaveDtype d) {
  switch (d) {
    case SaveDtype::bf16: return io::DType::bf16;
    case SaveDtype::fp16: return io::DType::f16;
    case SaveDtype::fp32: break;
  }
  return io::DType::f32;
}

}  // namespace

SftResult run_sft(RunConfig config) {
  const auto t_start = std::chrono::steady_clock::now();
  // Resolve and check everything first (a missing GPU, an unwritable model directory, overlong
  // records), writing nothing; then open the run directory.
  const std::unique_ptr<dist::Communicator> comm = dist::make_single_process_communicator();
  RunRequest request;
  request.command = "sft";
  RunPlan plan = plan_run(std::move(config), request, *comm);
  open_run(plan);
  const RunConfig& cfg = plan.config;
  const RunContext& ctx = plan.ctx;
  const tokenizer::Tokenizer& tok = ctx.tokenizer;
  const torch::Device device = torch_device(plan.device);
  const std::vector<SftExample>& train = plan.sft_examples;
  const std::vector<data::TaskRecord>& test_records = plan.test.kept;
  const std::filesystem::path& model_dir = plan.sft_model_dir;
  spdlog::info("sft: {} train / {} eval records, model {} params, precision {}, device {}", train.size(),
               test_records.size(), model::llama_layout(cfg.model).total,
               config::enum_name(cfg.precision.mode), device.str());

  const model::ParamLayout layout = model::llama_layout(cfg.model);
  torch::Tensor master = torch::empty({layout.total});
  model::init_llama_weights(layout, cfg.model, master, ctx.seeds.init);  // on the CPU: the same start anywhere
  if (cfg.precision.offload == precision::Offload::none) master = master.to(device);  // offloaded: stays on the host
  TrainableWeights weights(cfg.model, master, with_compute(cfg.precision, plan.compute), ctx.seeds.rounding, nullptr,
                           {}, device);
  record_in_run_json(ctx, {{"forward_dtype", c10::toString(weights.forward_dtype())}});
  const auto verifier = reward::make_verifier(reward::verifier_name(cfg.reward, config::enum_name(cfg.data.task)), cfg.reward);
  EvalOptions eval_opts;
  eval_opts.max_new_tokens = cfg.rollout.max_new_tokens;
  eval_opts.stop_ids = ctx.stop_ids;  // the EOS, which ends the completions it trains on

  RecordOrder order(train.size(), ctx.seeds.data);
  std::ofstream metrics(ctx.run_dir / "sft_metrics.jsonl");
  double accuracy = 0.0;
  double loss_sum = 0.0;
  int64_t tokens_seen = 0;
  auto t_last = std::chrono::steady_clock::now();
  SkipGuard skip_guard(cfg, "sft");
  HealthThresholds thresholds;
  thresholds.loss_must_fall = true;
  RunHealth health(1, cfg.sft.steps, 0, thresholds, "sft");
  int64_t skipped_steps = 0;
  for (int64_t step = 1; step <= cfg.sft.steps; ++step) {
    std::vector<std::size_t> idx;
    while (int64_t(idx.size()) < cfg.sft.batch_size) idx.push_back(order.next());
    auto [host_tokens, host_mask] = make_batch(train, idx, tok.pad_id());
    const torch::Tensor tokens = host_tokens.to(device), mask = host_mask.to(device);
    const int64_t L = tokens.size(1);
    const torch::Tensor logits = weights.model().forward(tokens.narrow(1, 0, L - 1));  // (B, L-1, V)
    const torch::Tensor nll = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}), tokens.narrow(1, 1, L - 1).reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    const torch::Tensor loss = (nll * mask.reshape({-1})).sum() / mask.sum();
    (loss * weights.loss_scale()).backward();
    weights.accumulate_grads();
    const double lr = cfg.sft.lr.lr_at(cfg.optim.lr, step, cfg.sft.steps);
    const OptimizerStepStats st = weights.optimizer_step(cfg.optim, lr);
    skip_guard.record(step, st.skipped, st.loss_scale, lr);
    const double step_loss = loss.item<double>();
    loss_sum += step_loss;
    skipped_steps += st.skipped ? 1 : 0;
    health.observe({{"step", step}, {"loss", step_loss}, {"skipped_steps", skipped_steps}});
    tokens_seen += int64_t(host_mask.sum().item<double>());

    const bool last = step == cfg.sft.steps;
    const bool eval_now = last || (cfg.sft.eval_every > 0 && step % cfg.sft.eval_every == 0);
    if (eval_now) {
      const EvalResult ev = evaluate(weights.model(), tok, test_records, ctx.prompts, *verifier, eval_opts);
      accuracy = ev.accuracy;
      spdlog::info("sft step {}/{}: greedy test accuracy {:.3f} ({} records); e.g. {}", step,
                   cfg.sft.steps, ev.accuracy, ev.records, ev.examples.empty() ? "" : ev.examples[0]);
      metrics << nlohmann::json{{"step", step}, {"eval_accuracy", ev.accuracy}, {"eval_mean_reward", ev.mean_reward}}.dump() << "\n";
    }
    if (step % cfg.sft.log_every == 0 || last) {
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - t_start).count();
      const double window = std::chrono::duration<double>(now - t_last).count();
      t_last = now;
      const int64_t n = step % cfg.sft.log_every == 0 ? cfg.sft.log_every : step % cfg.sft.log_every;
      const double eta = elapsed / double(step) * double(cfg.sft.steps - step);
      spdlog::info("sft step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad_norm {:.3f} | changed {:.3f} | "
                   "{:.0f} tok/s | {:.0f}s elapsed, ETA {:.0f}s",
                   step, cfg.sft.steps, loss_sum / double(n), lr, st.grad_norm,
                   st.elements ? double(st.changed) / double(st.elements) : 0.0,
                   double(tokens_seen) / std::max(window, 1e-9), elapsed, eta);
      metrics << nlohmann::json{{"step", step}, {"loss", loss_sum / double(n)}, {"lr", lr},
                                {"grad_norm", st.grad_norm}, {"skipped", st.skipped},
                                {"loss_scale", st.loss_scale}}.dump() << "\n";
      metrics.flush();
      loss_sum = 0.0;
      tokens_seen = 0;
    }
  }

  SftResult result;
  result.model_dir = model_dir;
  const model::SpecialTokens special{tok.bos_id(), tok.eos_id(), tok.pad_id(), {}};
  model::save_pretrained(result.model_dir, cfg.model, weights.master(), save_dtype(cfg.sft.save_dtype), special);
  tokenizer::copy_tokenizer_files(ctx.tokenizer_path, result.model_dir);
  std::filesystem::copy_file(ctx.run_dir / "config.yaml", result.model_dir / kRunConfigFile,
                             std::filesystem::copy_options::overwrite_existing);
  result.accuracy = accuracy;
  result.steps = cfg.sft.steps;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  health.end_of_run();
  result.health_summary = health.summary();
  result.health_failed = health.failed();
  if (health.warnings().empty() && !health.failed()) spdlog::info("{}", result.health_summary);
  else spdlog::warn("{}", result.health_summary);
  record_in_run_json(ctx, {{"health", health.to_json()}});
  io::write_json_file(result.model_dir / "sft_result.json",
                      {{"greedy_test_accuracy", result.accuracy}, {"eval_records", test_records.size()},
                       {"steps", result.steps}, {"seconds", result.seconds}});
  spdlog::info("sft done in {:.0f}s: greedy test accuracy {:.3f}; model written to {}", result.seconds,
               result.accuracy, result.model_dir.string());
  return result;
}

}  // namespace unstuck::train
