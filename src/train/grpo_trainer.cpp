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
#include "unstuck/config/lr_schedule.h"
#include "train/grpo_internal.h"
#include "train/tool_turns.h"

namespace unstuck::train {
namespace {

// `t` on `device`: itself (the same buffer, moved: no new reference) when it is there already.
torch::Tensor on_device(torch::Tensor t, const torch::Device& device) {
  if (t.device() == device) return t;  // a parameter returned by name is moved, never copied
  return t.to(device);
}

// Slices of the start-weight comparison: bounded temporaries, whatever the model's size.
constexpr int64_t kCompareSlice = 1 << 22;

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

GrpoTrainer::GrpoTrainer(const RunConfig& config, const RunContext& ctx, dist::Communicator& comm, torch::Tensor master,
                         const std::vector<data::TaskRecord>& train, std::vector<data::TaskRecord> my_test,
                         torch::Device device, precision::ComputeMode compute, const RunDecisions& decisions,
                         FrozenBase base, std::shared_ptr<reward::Verifier> scorer,
                         std::shared_ptr<rollout::ToolRunner> tools)
    : cfg_(config),
      ctx_(ctx),
      comm_(comm),
      device_(device),
      train_(train),
      my_test_(std::move(my_test)),
      // precision.offload: optimizer keeps the master (and moments) on the host.
      weights_(
          config.model,
          on_device(std::move(master),
                    config.precision.offload == precision::Offload::optimizer ? torch::Device(torch::kCPU) : device),
          with_compute(config.precision, compute), ctx.seeds.rounding, &comm,
          FrozenBase{std::move(base.spec),
                     base.weights.defined() ? on_device(std::move(base.weights), device) : torch::Tensor(),
                     torch::Tensor()},
          device),
      verifier_name_(reward::verifier_name(config.reward, config::enum_name(config.data.task))),
      verifier_(scorer ? std::move(scorer)
                       : std::shared_ptr<reward::Verifier>(reward::make_verifier(verifier_name_, config.reward))),
      order_(train.size(), ctx.seeds.data),
      // Rollouts draw counter-based uniforms (rollout::sampling_uniforms); this generator is never
      // advanced by training and stays in checkpoints (rng.bin) only for their format.
      sampling_(at::make_generator<at::CPUGeneratorImpl>(ctx.seeds.sampling)),
      skip_guard_(config, "train"),
      decisions_(decisions) {
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
    if (decisions.keeps_reference()) {
      reference_ = std::make_unique<model::LlamaModel>(cfg_.model, weights_.model().flat_weights());
      if (pissa_start_.defined())
        reference_->set_adapters(model::lora_spec(cfg_.lora), weights_.model().adapter_flat().clone());
    }
  } else if (decisions.keeps_reference())
    reference_ = std::make_unique<model::LlamaModel>(cfg_.model, weights_.model().flat_weights().clone());
  else
    base_reader_ = std::make_unique<model::FlatWeightsReader>(cfg_.grpo.base_model, cfg_.model);
  // The weights as built are what the plan decided (its dtypes are in run.json and the plan's block).
  const std::string forward = c10::toString(weights_.forward_dtype());
  if (forward != decisions.forward_dtype || reference_dtype() != decisions.reference_dtype ||
      c10::toString(weights_.compute().scalar_type()) != decisions.compute_weights_dtype)
    throw std::logic_error("GrpoTrainer: the weights compute in " + forward + " with the reference " +
                           reference_dtype() + ", the plan decided " + decisions.forward_dtype + " and " +
                           decisions.reference_dtype);
  if (cfg_.tools.enabled()) {
    tools_ = tools ? std::move(tools) : std::make_shared<rollout::ToolRunner>(cfg_.tools);
    tool_prompts_ = std::make_unique<data::PromptFormatter>(ctx_.prompts.with_tools(tools_->schemas()));
  }
  check_environment_readers(*verifier_, tools_.get());
  gen_opts_.sampling = cfg_.rollout;
  gen_opts_.sampling.decode = decisions.decode;
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
  const precision::Philox4x32 k = precision::philox4x32_10(
      precision::Philox4x32{{uint32_t(step), uint32_t(uint64_t(step) >> 32), uint32_t(epoch), 0}},
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
  const config::GrpoConfig& g = cfg_.grpo;
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
  rollout_phase(step, &ro, &sc, &smp, &time);
  if (cfg_.grpo.log_rollouts_every > 0 && step % cfg_.grpo.log_rollouts_every == 0) log_rollouts(step, ro, sc);
  const RolloutBatch batch = make_batch(ro);
  const algo::Advantages adv = advantages_of(shaped_rewards(batch, &sc));
  const torch::Tensor advantages = torch::tensor(adv.values).to(device_);  // (N)
  const bool with_ref = reference_due(step);
  // One epoch of one minibatch: the training forward measures too (same weights as sampling).
  // lora.dropout: the update's forwards drop adapter inputs, so the policy is measured on its own.
  std::optional<Measurement> meas;
  if (decisions_.measure_apart) meas = measure(batch, with_ref);
  const auto t_update = std::chrono::steady_clock::now();
  const UpdateStats up = update(step, batch, advantages, with_ref, &meas);
  time.update = seconds_since(t_update);
  if (phase_end_) phase_end_("update");
  time.step = seconds_since(t0);
  return metrics(step, sc, smp, adv, batch, *meas, up, time);
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
        count += (same ? cur.view(bits).ne(ref.view(bits))
                       : cur.to(ref.scalar_type()).view(torch::kInt).ne(ref.view(torch::kInt)))
                     .sum();
        continue;
      }
      if (!start_master.defined()) {
        start_master = torch::empty({std::min(kCompareSlice, end - begin)}, torch::kFloat32);
        start_bits = torch::empty({start_master.numel()}, torch::TensorOptions().dtype(now.scalar_type()));
      }
      // grpo.round_base_to_fp8: the base's own channel scales first (one pass over it, once).
      if (cfg_.grpo.round_base_to_fp8 && !base_scales_)
        base_scales_ = std::make_unique<Fp8Channels>(precision::fp8_channels(
            weights_.layout().fp8_matrices(), weights_.layout().total,
            [&](int64_t at, int64_t count_n, float* out) { base_reader_->read(at, count_n, out); },
            cfg_.precision.threads));
      const auto read_start = [&](int64_t at, int64_t count_n, float* out) {
        base_reader_->read(at, count_n, out);
        if (cfg_.grpo.round_base_to_fp8)
          precision::round_to_fp8_grid(out, uint64_t(at), std::size_t(count_n), *base_scales_, cfg_.precision.threads);
        else if (cfg_.grpo.round_base_to_bf16)
          round_base_to_grid(out, count_n, cfg_.precision.analog_mantissa_bits);
      };
      // Formats with scales (FP8): the start master's, from one pass over it (once).
      if (!start_format_) {
        start_format_ = weights_.host_format();
        start_format_->rescale(read_start, weights_.layout().total);
      }
      float* m = start_master.data_ptr<float>();
      read_start(b, n, m);
      weights_.materialize_slice(m, b, n, start_bits.data_ptr(), 0, start_format_->scales());
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
  opts.stop = stop_flag_;
  if (tools_)  // the same tool rounds as the rollouts, greedy
    opts.turns = eval_tool_turns(weights_.model(), tool_hooks(), tool_limits(), cfg_.run.seed);
  evaluate_with_environment(opts, tools_, stop_flag_);
  // Each rank scores its share: correct, records, and whether a signal stopped its scoring. Every
  // rank reaches the sum, stopped or not, so a signal to one rank leaves no collective unmatched.
  double sums[3] = {0, double(my_test_.size()), 0};
  std::string stopped;
  try {
    if (!my_test_.empty())
      sums[0] =
          train::evaluate(weights_.model(), ctx_.tokenizer, my_test_, prompt_format(), *verifier_, opts).accuracy *
          double(my_test_.size());
  } catch (const Interrupted& e) {
    sums[2] = 1;
    stopped = e.what();
  }
  comm_.all_reduce_sum(sums, 3);
  if (sums[2] > 0) throw Interrupted(stopped.empty() ? "another rank's scoring was stopped by signal" : stopped);
  return sums[0] / std::max(sums[1], 1.0);
}

void GrpoTrainer::restore(const TrainerState& st, const std::string& where) {
  // PiSSA: the residual base and the start adapters were computed again for this resume; their SVD
  // depends on the thread count and the CPU, and a different one would continue on another base.
  if (!st.pissa_start.empty() && pissa_start_.defined() && pissa_start_checksum() != st.pissa_start)
    throw UserError(where +
                    ": lora.init: pissa: the SVD of the base computed for this resume differs from the one "
                    "the run started with (start adapters " +
                    st.pissa_start + " with " + std::to_string(st.pissa_threads) + " libtorch threads on '" +
                    st.pissa_cpu + "'; here " + pissa_start_checksum() + " with " +
                    std::to_string(at::get_num_threads()) + " on '" + cpu_model_name() +
                    "'), so it would train on another frozen base; resume with precision.threads=" +
                    std::to_string(st.pissa_threads) + " on the same kind of CPU");
  if (st.master.defined())
    weights_.restore(st.master, st.exp_avg, st.exp_avg_sq, st.optimizer_steps, st.scaler);
  else  // deferred: the buffers stay in the checkpoint's file and are read a slice at a time
    weights_.restore([&](const std::string& name, int64_t begin, int64_t n,
                         float* out) { read_checkpoint_buffer(st, name, begin, n, out); },
                     st.optimizer_steps, st.scaler);
  order_.restore(st.data_rng, st.order, st.cursor, where);
  sampling_.set_state(
      torch::from_blob(const_cast<uint8_t*>(st.sampling_rng.data()), {int64_t(st.sampling_rng.size())}, torch::kUInt8)
          .clone());
  skipped_ = st.skipped_steps;
}

TrainerState GrpoTrainer::checkpoint_state(int64_t step) {
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
  // This rank's shard only (each rank writes its own): the buffers themselves on the host, a copy
  // of the shard from a device.
  st.master = weights_.master().cpu();
  st.exp_avg = weights_.exp_avg().cpu();
  st.exp_avg_sq = weights_.exp_avg_sq().cpu();
  st.shard_begin = weights_.shard_begin();
  st.elements = weights_.layout().total;
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
