// The GRPO run driver: loads the base policy and the data, resumes a checkpoint, then loops
// GrpoTrainer::step() with evaluation, metrics, checkpoints and stop signals around it. Data
// parallel over the ranks of a communicator: each rank rolls out its share of the prompts (whole
// groups), the optimizer state is sharded, metrics are reduced before rank 0 writes them, and rank
// 0 writes the checkpoints of the gathered state.
#include "unstuck/train/grpo.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <optional>

#include "train/grpo_metrics.h"
#include "train/grpo_trainer.h"
#include "unstuck/common/error.h"
#include "unstuck/common/memory_usage.h"
#include "unstuck/config/config.h"
#include "unstuck/config/preflight.h"
#include "unstuck/data/dataset.h"
#include "unstuck/dist/data_parallel.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/model_io.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/train/evaluate.h"
#include "unstuck/train/model_export.h"
#include "unstuck/train/policy_dir.h"
#include "unstuck/train/run_setup.h"
#include "unstuck/train/torch_device.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {
namespace {

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

}  // namespace

std::filesystem::path resolve_resume_checkpoint(const std::filesystem::path& path) {
  if (std::filesystem::exists(path / "manifest.json")) return path;
  const std::filesystem::path latest = latest_checkpoint(path / "checkpoints");
  if (latest.empty())
    throw UserError("nothing to resume in '" + path.string() +
                    "': no checkpoint (expected <run dir>/checkpoints/step_N/manifest.json)");
  return latest;
}

namespace {

// Bytes of a model directory's weight files (mapped while they load).
double weight_file_bytes(const std::filesystem::path& dir) {
  double bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") bytes += double(e.file_size(ec));
  return bytes;
}

// This process's peak memory on `device` so far: RSS high-water on the CPU, the CUDA caching
// allocator's peak allocated bytes on a GPU.
double device_peak_bytes(const torch::Device& device) {
  if (device.is_cuda())
    return double(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index())
                      .allocated_bytes[std::size_t(c10::CachingAllocator::StatType::AGGREGATE)]
                      .peak);
  return double(peak_rss_bytes());
}

nlohmann::json plan_json(const MemoryPlan& plan) {
  nlohmann::json parts = nlohmann::json::array(), phases = nlohmann::json::object();
  for (const MemoryPart& p : plan.parts)
    parts.push_back({{"what", p.what}, {"phase", p.phase.empty() ? "held" : p.phase}, {"bytes", p.bytes},
                     {"keys", p.keys}, {"knob", p.knob}});
  for (const std::string& ph : plan.phases()) phases[ph] = plan.phase_peak(ph);
  return {{"peak_bytes", plan.peak()}, {"peak_phase", plan.peak_phase()}, {"held_bytes", plan.held()},
          {"baseline_bytes", plan.baseline}, {"phase_peak_bytes", phases}, {"parts", parts}};
}

}  // namespace

GrpoResult run_grpo(RunConfig cfg, const std::filesystem::path& resume, dist::Communicator* comm_in) {
  StartupClock startup;
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
  // Its config.json first: the memory plan is checked before the weights are loaded.
  const model::HfConfig hf = model::read_hf_config(base / "config.json");
  const bool activation_checkpointing = cfg.model.activation_checkpointing;  // a training choice, not the model's
  cfg.model = hf.model;
  cfg.model.activation_checkpointing = activation_checkpointing;
  if (cfg.tokenizer.path.empty()) cfg.tokenizer.path = base.string();  // tokenizer.json or tokenizer.model
  // Everything that can fail before training fails here, before the run directory is touched:
  // the config, the device, the data (prompts longer than max_seq_len - max_new_tokens are dropped
  // and counted), the checkpoint to resume (contents checked against this model and data).
  RunContext ctx = prepare_run(cfg, "train", /*model_from_checkpoint=*/true);
  startup.mark("tokenizer and config");
  const torch::Device device = torch_device(cfg);
  if (cfg.precision.analog_mantissa_bits > 0 && !device.is_cpu())
    throw UserError("precision.analog_mantissa_bits (the grid-scaled analog) runs on the CPU only, and run.device "
                    "resolves to " + device.str() + ": set run.device: cpu");
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
  // Memory, sized by the longest prompt kept (GRPO rows are that plus rollout.max_new_tokens).
  const int64_t longest_prompt = std::min(max_prompt, std::max(train_fit.longest, test_fit.longest));
  startup.mark("data");
  MemoryPlanInputs plan_in;
  plan_in.longest_prompt = longest_prompt;
  plan_in.baseline_bytes = device.is_cpu() ? double(current_rss_bytes()) : 0.0;
  plan_in.weight_file_bytes = weight_file_bytes(base);
  const MemoryPlan plan = preflight(cfg, "train", -1, plan_in);
  model::LoadedModel loaded = model::load_pretrained(base);
  startup.mark("base model");
  const std::vector<data::TaskRecord>& train = train_fit.kept;
  std::vector<data::TaskRecord>& test = test_fit.kept;
  std::optional<TrainerState> resumed;
  std::filesystem::path ckpt;
  if (!resume.empty()) {
    ckpt = resolve_resume_checkpoint(resume);
    resumed = load_checkpoint(ckpt, CheckpointBuffers::defer);  // buffers read from the file by restore()
    check_checkpoint_fits(*resumed, model::llama_layout(cfg.model).total, train.size(), ckpt);
    startup.mark("checkpoint");
  }
  ctx.stop_ids = stop_token_ids(base, loaded.tokens.eos_ids, ctx.tokenizer, cfg.model.vocab_size);
  open_run(ctx, cfg, "train", rank);
  report_fits();
  spdlog::info("train: completions end at token id(s) {} (the tokenizer's EOS and the eos_token_id of {}'s "
               "config.json / generation_config.json)", nlohmann::json(ctx.stop_ids).dump(), base.string());
  spdlog::info("train: {}", memory_report(plan));
  if (lead) record_in_run_json(ctx, {{"memory_plan", plan_json(plan)}});
  if (resume.empty() && !latest_checkpoint(ctx.run_dir / "checkpoints").empty())
    throw UserError("run directory " + ctx.run_dir.string() +
                    " already holds checkpoints of an earlier run; continue it with `unstuck train --resume " +
                    ctx.run_dir.string() + "` or pick another run.name");

  // The trainer adopts this buffer as its master (moved in below: one FP32 copy of the model, not two).
  torch::Tensor master = std::move(loaded.flat);
  if (cfg.grpo.round_base_to_bf16) round_base_to_grid_(master, cfg.precision.analog_mantissa_bits);
  if (cfg.grpo.eval_samples > 0 && int64_t(test.size()) > cfg.grpo.eval_samples) test.resize(std::size_t(cfg.grpo.eval_samples));
  const auto [test_begin, test_end] = dist::rank_range(int64_t(test.size()), world, rank);
  // precision.compute: auto is timed once (rank 0, then broadcast: every rank computes alike) or
  // taken from the checkpoint being resumed, so a resume computes as the run it continues.
  std::optional<precision::ComputeMode> recorded;
  if (resumed && !resumed->compute.empty())
    recorded = resumed->compute == "fp32" ? precision::ComputeMode::fp32 : precision::ComputeMode::native;
  ComputeChoice compute;
  if (lead) compute = resolve_compute(cfg.model, cfg.precision, device, recorded);
  if (world > 1) {
    int64_t mode = int64_t(compute.mode);
    comm.broadcast(&mode, 1, dist::DataType::i64, 0);
    compute.mode = precision::ComputeMode(mode);
  }
  startup.mark("run directory");
  GrpoTrainer trainer(cfg, ctx, comm, std::move(master), train,
                      std::vector<data::TaskRecord>(test.begin() + test_begin, test.begin() + test_end), device,
                      compute.mode);
  startup.mark("trainer");
  const TrainableWeights& weights = trainer.weights();
  if (lead)  // record the precision and the device actually used
    record_in_run_json(ctx, {{"compute_weights_dtype", c10::toString(weights.compute().scalar_type())},
                             {"forward_dtype", c10::toString(weights.forward_dtype())},
                             {"compute_choice", compute.to_json(cfg.precision.compute)},
                             {"reference_dtype", trainer.reference_dtype()},
                             {"device", device.str()},
                             {"stop_token_ids", ctx.stop_ids},
                             {"world_size", world},
                             {"dist_backend", comm.backend_name()}});
  spdlog::info("train: GRPO from {} ({} params), {} x {} rollouts per step, precision {} (forward {}), {} steps, "
               "{} rank(s) ({}), device {}",
               base.string(), weights.layout().total, cfg.grpo.prompts_per_step, cfg.grpo.group_size,
               config::enum_name(cfg.precision.mode), c10::toString(weights.forward_dtype()), cfg.grpo.steps,
               world, comm.backend_name(), device.str());

  GrpoResult result;
  result.run_dir = ctx.run_dir;
  int64_t first_step = 1;
  if (resumed) {
    trainer.restore(*resumed, "checkpoint " + ckpt.string());
    startup.mark("restore");
    first_step = resumed->step + 1;
    spdlog::info("train: resumed from {} at step {}", ckpt.string(), resumed->step);
  }
  MetricsWriter writer(ctx.run_dir, lead,
                       resumed ? std::optional<int64_t>(resumed->step) : std::nullopt, first_step, cfg.grpo.steps);
  result.first_reward_mean = writer.first_reward_mean();
  const auto save = [&](int64_t step) {
    const TrainerState st = trainer.checkpoint_state(step);  // every rank takes part; rank 0 writes
    if (!lead) return;
    const auto dir = save_checkpoint(ctx.run_dir / "checkpoints", st, int(cfg.grpo.keep_checkpoints));
    spdlog::info("train: checkpoint {}", dir.string());
  };
  trainer.report_startup(&startup);
  bool warned_peak = false;
  for (int64_t step = first_step; step <= cfg.grpo.steps; ++step) {
    MetricsLine m = trainer.step(step);
    // The measured peak against the plan: the process's RSS high-water on the CPU, the caching
    // allocator's most allocated on a GPU (both since the start).
    const double measured = device_peak_bytes(device);
    m["peak_memory_bytes"] = measured;
    if (measured > plan.peak() * 1.1 && !warned_peak) {
      warned_peak = true;
      spdlog::warn("train: measured peak memory {} at step {} is {:.2f}x the plan's {}; please report it with the "
                   "run's run.json",
                   format_bytes(measured), step, measured / plan.peak(), format_bytes(plan.peak()));
    }
    const bool last_step = step == cfg.grpo.steps;
    if (last_step || (cfg.grpo.eval_every > 0 && step % cfg.grpo.eval_every == 0)) {
      m["eval_accuracy"] = trainer.evaluate();
      result.final_eval_accuracy = m["eval_accuracy"].get<double>();
    }
    writer.write(m);
    result.first_reward_mean = writer.first_reward_mean();
    result.last_reward_mean = m["reward_mean"].get<double>();
    const bool stop = comm.any(g_stop_requested);  // every rank stops after the same step
    if (last_step || stop || (cfg.grpo.checkpoint_every > 0 && step % cfg.grpo.checkpoint_every == 0)) save(step);
    if (stop && !last_step) {
      spdlog::warn("train: stopped by signal after step {}; resume with `unstuck train --resume {}`", step,
                   ctx.run_dir.string());
      result.steps = step;
      result.interrupted = true;
      return result;
    }
  }
  result.steps = cfg.grpo.steps;
  if (lead && cfg.grpo.final_model) write_final_model(ctx.run_dir, cfg, weights.compute().cpu());
  return result;
}

}  // namespace unstuck::train
