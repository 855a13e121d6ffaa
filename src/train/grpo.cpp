// The GRPO run driver: the run's plan (run_plan.h: everything resolved and checked), the run
// directory, the trainer over the base weights, then GrpoTrainer::step() in a loop with
// evaluation, metrics, checkpoints, the memory and health watches and stop signals around it. Data
// parallel over the ranks of a communicator: each rank rolls out its share of the prompts (whole
// groups), the optimizer state is sharded, metrics are reduced before rank 0 writes them, and each
// rank writes its shard of every checkpoint.
#include "unstuck/train/grpo.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <exception>
#include <optional>

#include "train/grpo_metrics.h"
#include "train/grpo_trainer.h"
#include "train/memory_watch.h"
#include "train/run_health.h"
#include "unstuck/common/error.h"
#include "unstuck/common/memory_usage.h"
#include "unstuck/config/config.h"
#include "unstuck/train/memory_plan.h"
#include "unstuck/dist/data_parallel.h"
#include "unstuck/model/model_io.h"
#include "train/base_weights.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/model_export.h"
#include "train/peak_check.h"
#include "unstuck/train/run_plan.h"
#include "unstuck/train/torch_device.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {
namespace {

// Set by SIGINT/SIGTERM; the loop finishes its step, checkpoints and returns. A signal handler can
// only reach static storage, so this flag is the one global of the trainer.
std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested = true; }

std::atomic<bool> g_keep_after_failure{false};  // keep_stop_signals_after_a_failed_run()

// Installs the stop handlers for the lifetime of a run and restores the previous ones after it,
// except after a failed run in a process that asked to keep them (keep_stop_signals_after_a_failed_run).
class StopSignals {
 public:
  StopSignals() : exceptions_(std::uncaught_exceptions()) {
    g_stop_requested = false;
    prev_int_ = std::signal(SIGINT, request_stop);
    prev_term_ = std::signal(SIGTERM, request_stop);
  }
  ~StopSignals() {
    if (g_keep_after_failure && std::uncaught_exceptions() > exceptions_) return;  // failing
    std::signal(SIGINT, prev_int_);
    std::signal(SIGTERM, prev_term_);
  }

 private:
  int exceptions_;
  void (*prev_int_)(int);
  void (*prev_term_)(int);
};

// This process's peak memory on `device` so far: RSS high-water on the CPU, the CUDA caching
// allocator's peak allocated bytes on a GPU.
double device_peak_bytes(const torch::Device& device) {
  if (device.is_cuda())
    return double(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index())
                      .allocated_bytes[std::size_t(c10::CachingAllocator::StatType::AGGREGATE)]
                      .peak);
  return double(peak_rss_bytes());
}

// What to lower when the memory runs short: the knob of the largest part of the plan's peak phase.
std::string peak_knob(const MemoryPlan& plan) {
  const MemoryPart* big = nullptr;
  for (const MemoryPart& p : plan.parts)
    if (p.phase == plan.peak_phase() && !p.knob.empty() && (!big || p.bytes > big->bytes)) big = &p;
  return big ? big->knob : "lower grpo.prompts_per_step or rollout.max_new_tokens";
}

// The trainer over the base weights the plan names: the loaded FP32 buffer is adopted as its
// master (one FP32 copy of the model, not two); this rank's share of the test records.
std::unique_ptr<GrpoTrainer> make_trainer(RunPlan& plan, dist::Communicator& comm, const torch::Device& device,
                                          StartupClock& startup) {
  const RunConfig& cfg = plan.config;
  torch::Tensor master = load_base_weights(cfg, plan.model_dir, plan.hf);
  startup.mark("base model");
  // LoRA: the base is frozen and the adapters are the trainable master.
  FrozenBase base;
  if (cfg.lora.enabled()) {
    base.spec = model::lora_spec(cfg.lora);
    base.weights = std::move(master);
    master = start_adapters(cfg, plan.ctx.seeds.init, base.weights);  // PiSSA: the base becomes the residual
    if (cfg.lora.init == model::LoraInit::pissa) base.start = master.clone();
    startup.mark("adapters");
  }
  std::vector<data::TaskRecord>& test = plan.test.kept;
  if (cfg.grpo.eval_samples > 0 && int64_t(test.size()) > cfg.grpo.eval_samples)
    test.resize(std::size_t(cfg.grpo.eval_samples));
  const auto [test_begin, test_end] = dist::rank_range(int64_t(test.size()), comm.world_size(), comm.rank());
  auto trainer = std::make_unique<GrpoTrainer>(
      cfg, plan.ctx, comm, std::move(master), plan.train.kept,
      std::vector<data::TaskRecord>(test.begin() + test_begin, test.begin() + test_end), device, plan.compute,
      plan.decisions, std::move(base), std::move(plan.scorer), std::move(plan.tools));
  startup.mark("trainer");
  const TrainableWeights& weights = trainer->weights();
  spdlog::info(
      "train: GRPO from {} ({} {}params), {} x {} rollouts per step, precision {} (forward {}), {} steps, "
      "{} rank(s) ({}), device {}",
      plan.model_dir.string(), weights.layout().total, weights.lora() ? "trainable adapter " : "",
      cfg.grpo.prompts_per_step, cfg.grpo.group_size, config::enum_name(cfg.precision.mode),
      c10::toString(weights.forward_dtype()), cfg.grpo.steps, comm.world_size(), comm.backend_name(), device.str());
  return trainer;
}

// The run's end after `steps` steps: the health summary logged and, on the lead rank, run.json's
// end record (the start-up's stages and the run's health).
GrpoResult end_of_run(GrpoResult result, int64_t steps, RunHealth& health, const GrpoTrainer& trainer,
                      const RunContext& ctx, bool lead) {
  result.steps = steps;
  health.end_of_run();
  result.health_summary = health.summary();
  result.health_failed = health.failed();
  if (health.warnings().empty() && !health.failed())
    spdlog::info("{}", result.health_summary);
  else
    spdlog::warn("{}", result.health_summary);
  if (lead) {
    nlohmann::json end{{"health", health.to_json()}};
    if (!trainer.startup_record().is_null()) end["startup"] = trainer.startup_record();
    record_in_run_json(ctx, end);
  }
  return result;
}

// The steps from the first (after the checkpoint resumed) to grpo.steps, with evaluation, metrics,
// checkpoints, the memory and health watches and the stop signals around each.
GrpoResult train_steps(const RunPlan& plan, GrpoTrainer& trainer, dist::Communicator& comm, const torch::Device& device,
                       StartupClock& startup) {
  const RunConfig& cfg = plan.config;
  const bool lead = comm.rank() == 0;  // writes metrics, TensorBoard events and checkpoints
  const RunContext& ctx = plan.ctx;
  GrpoResult result;
  result.run_dir = ctx.run_dir;
  int64_t first_step = 1;
  if (plan.resumed) {
    trainer.restore(*plan.resumed, "checkpoint " + plan.resume_checkpoint.string());
    startup.mark("restore");
    first_step = plan.resumed->step + 1;
    spdlog::info("train: resumed from {} at step {}", plan.resume_checkpoint.string(), plan.resumed->step);
  }
  MetricsWriter writer(ctx.run_dir, lead, plan.resumed ? std::optional<int64_t>(plan.resumed->step) : std::nullopt,
                       first_step, cfg.grpo.steps);
  result.first_reward_mean = writer.first_reward_mean();
  const auto save = [&](int64_t step) {
    const TrainerState st = trainer.checkpoint_state(step);  // this rank's shard
    const auto dir = save_checkpoint(ctx.run_dir / "checkpoints", st, int(cfg.grpo.keep_checkpoints), &comm);
    if (lead) spdlog::info("train: checkpoint {}", dir.string());
  };
  RunHealth health(cfg.grpo.minibatches * cfg.grpo.ppo_epochs, cfg.grpo.steps - first_step + 1,
                   plan.resumed ? plan.resumed->skipped_steps : 0);
  const auto finish = [&](int64_t steps) { return end_of_run(result, steps, health, trainer, ctx, lead); };
  // On the CPU the kernel's ceiling is watched mid-step; a GPU's caching allocator raises instead.
  std::optional<MemoryWatch> watch;
  if (device.is_cpu()) {
    watch.emplace(ctx.run_dir, plan.memory.peak(), peak_knob(plan.memory));
    trainer.watch_memory(&*watch);
  }
  trainer.report_startup(&startup);
  trainer.stop_scoring_on(&g_stop_requested);
  // The measured high-water against the plan after each phase (src/train/peak_check.h).
  PeakCheck peaks(plan.memory, device.is_cuda() ? kPeakAllowanceGpuBytes : kPeakAllowanceCpuBytes);
  int64_t current_step = first_step;
  const auto check_peak = [&](const char* phase) {
    if (auto warning = peaks.after(phase, device_peak_bytes(device), current_step)) spdlog::warn("{}", *warning);
  };
  check_peak("load");
  trainer.on_phase_end(check_peak);
  for (int64_t step = first_step; step <= cfg.grpo.steps; ++step) {
    current_step = step;
    if (watch) watch->set_step(step);  // it is also checked at every progress point of the step
    MetricsLine m;
    try {
      m = trainer.step(step);
    } catch (const Interrupted& e) {  // Ctrl-C while a reward function hung: the step is dropped
      const std::filesystem::path last = latest_checkpoint(ctx.run_dir / "checkpoints");
      spdlog::warn("train: stopped by signal during step {} ({}); the step was not applied; {}", step, e.what(),
                   last.empty() ? "no checkpoint was written yet"
                                : "resume from " + last.string() + " with `unstuck train --resume " +
                                      ctx.run_dir.string() + "`");
      result.interrupted = result.dropped_step = true;
      return finish(step - 1);
    } catch (const c10::OutOfMemoryError& e) {
      const std::filesystem::path last = latest_checkpoint(ctx.run_dir / "checkpoints");
      throw UserError(fmt::format(
          "train: step {} ran out of memory on {} (the plan's peak is {}; {}); {}; {}", step, device.str(),
          format_bytes(plan.memory.peak()), plan.limit.where,
          last.empty() ? "no checkpoint was written yet" : "the last checkpoint, " + last.string() + ", is intact",
          peak_knob(plan.memory)));
    }
    // The measured peak against the plan: the process's RSS high-water on the CPU, the caching
    // allocator's most allocated on a GPU (both since the start).
    m["peak_memory_bytes"] = device_peak_bytes(device);
    const bool last_step = step == cfg.grpo.steps;
    if (last_step || (cfg.grpo.eval_every > 0 && step % cfg.grpo.eval_every == 0)) {
      try {
        m["eval_accuracy"] = trainer.evaluate();
        result.final_eval_accuracy = m["eval_accuracy"].get<double>();
      } catch (const Interrupted& e) {  // Ctrl-C while scoring: the step stands, its evaluation does not
        spdlog::warn("train: evaluation after step {} stopped by signal ({}); no eval_accuracy for it", step, e.what());
      }
    }
    writer.write(m);
    if (lead && step == first_step && !trainer.startup_record().is_null())  // kept if a later step fails
      record_in_run_json(ctx, {{"startup", trainer.startup_record()}});
    health.observe(m);
    result.first_reward_mean = writer.first_reward_mean();
    result.last_reward_mean = m["reward_mean"].get<double>();
    const bool stop = comm.any(g_stop_requested);  // every rank stops after the same step
    if (last_step || stop || (cfg.grpo.checkpoint_every > 0 && step % cfg.grpo.checkpoint_every == 0)) {
      save(step);
      check_peak("checkpoint");
    }
    if (stop && !last_step) {
      spdlog::warn("train: stopped by signal after step {}; resume with `unstuck train --resume {}`", step,
                   ctx.run_dir.string());
      result.interrupted = true;
      return finish(step);
    }
  }
  if (lead && cfg.grpo.final_model)
    write_final_model(ctx.run_dir, cfg, trainer.weights().compute().cpu(), trainer.pissa_start());
  return finish(cfg.grpo.steps);
}

}  // namespace

void keep_stop_signals_after_a_failed_run() { g_keep_after_failure = true; }

// The set-up of a run, each stage once: resolve and check (nothing written), open the run
// directory, load the base weights into the trainer, train.
GrpoResult run_grpo(RunConfig cfg, const std::filesystem::path& resume, dist::Communicator* comm_in) {
  StartupClock startup;
  const StopSignals stop_signals;
  const std::unique_ptr<dist::Communicator> own_comm = comm_in ? nullptr : dist::make_single_process_communicator();
  dist::Communicator& comm = comm_in ? *comm_in : *own_comm;
  RunRequest request;
  request.command = "train";
  request.resume = resume;
  request.keep_scorer = true;  // the reward workers start once, in the plan
  RunPlan plan = plan_run(std::move(cfg), request, comm, &startup);
  open_run(plan);
  startup.mark("run directory");
  const torch::Device device = torch_device(plan.device);
  const std::unique_ptr<GrpoTrainer> trainer = make_trainer(plan, comm, device, startup);
  return train_steps(plan, *trainer, comm, device, startup);
}

}  // namespace unstuck::train
