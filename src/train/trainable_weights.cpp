// Flat trainable state: gradient collection, loss-scaler handling, clipping and the fused AdamW step
// that rounds the master into the compute weights by the run's weight format; with several ranks,
// the ZeRO-1 sharding of that step (reduce-scatter of the gradient, update of the own shard,
// all-gather of the compute weights). A master on a CUDA device keeps every buffer there (same bits).
#include "unstuck/train/trainable_weights.h"

#include "train/flat_buffers.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/model/lazy_zeros.h"

namespace unstuck::train {
namespace {

// Moves a parameter's gradient into the flat gradient as soon as the backward pass has accumulated
// it, so the per-parameter gradients of the whole model never exist at once.
class FlatGradHook : public torch::autograd::PostAccumulateGradHook {
 public:
  FlatGradHook(TrainableWeights* weights, std::size_t index) : weights_(weights), index_(index) {}
  void operator()(const torch::autograd::Variable&) override { weights_->take_grad(index_); }

 private:
  TrainableWeights* weights_;
  std::size_t index_;
};

torch::Tensor padded(const torch::Tensor& t, int64_t n) {
  torch::Tensor out = model::lazy_zeros(n, t.scalar_type(), t.device());
  out.narrow(0, 0, t.numel()).copy_(t);
  return out;
}

precision::Place place_of(const torch::Device& device) {
  return {device.is_cuda(), device.is_cuda() ? device.index() : 0};
}

}  // namespace

bool TrainableWeights::on_device() const { return device_.is_cuda(); }

void TrainableWeights::materialize_compute(const torch::Tensor& full_master) {
  const float* master = full_master.data_ptr<float>();
  if (!offload_) return format_->materialize(master, 0, std::size_t(total_), compute_.data_ptr(), uint64_t(adam_step_));
  for (int64_t b = 0; b < total_; b += stage_compute_.numel()) {  // on the host a slice at a time, then to the device
    const int64_t n = std::min(stage_compute_.numel(), total_ - b);
    format_->materialize(master + b, uint64_t(b), std::size_t(n), stage_compute_.data_ptr(), uint64_t(adam_step_));
    compute_.narrow(0, b, n).copy_(stage_compute_.narrow(0, 0, n));
  }
}

TrainableWeights::TrainableWeights(const model::ModelConfig& config, torch::Tensor master,
                                   const precision::PrecisionConfig& precision, uint64_t rounding_seed,
                                   dist::Communicator* comm, FrozenBase base, std::optional<torch::Device> device)
    : precision_(precision),
      round_mode_(precision::round_mode_for(precision.mode)),
      rounding_seed_(rounding_seed),
      comm_(comm),
      device_(device.value_or(master.device())),
      offload_(precision.offload == precision::Offload::optimizer) {
  if (precision.compute == precision::ComputeMode::auto_)
    throw std::invalid_argument("TrainableWeights: resolve precision.compute auto first (train::resolve_compute)");
  const bool lora = base.weights.defined();
  layout_ = lora ? model::lora_layout(config, base.spec) : model::llama_layout(config);
  check_inputs(config, master, base);
  format_ = precision::WeightFormat::make(precision_, rounding_seed_, place_of(master.device()),
                                          lora ? std::vector<precision::Fp8Matrix>{} : layout_.fp8_matrices());
  allocate(std::move(master));  // a copied full master is released here, before the model is built
  build_model(config, std::move(base));
  if (precision::uses_loss_scaling(precision_.mode))
    scaler_ = std::make_unique<precision::DynamicLossScaler>(precision_.loss_scale);
  else
    scaler_ = std::make_unique<precision::ConstantLossScaler>(1.0);
}

void TrainableWeights::check_inputs(const model::ModelConfig& config, const torch::Tensor& master,
                                    const FrozenBase& base) const {
  const bool lora = base.weights.defined(), fp8 = precision::is_fp8(precision_.mode);
  if (lora && fp8)
    throw UserError(std::string("precision.mode ") + config::enum_name(precision_.mode) +
                    " with lora.rank > 0: FP8 adapters are not supported");
  if (master.scalar_type() != torch::kFloat32 || master.numel() != layout_.total)
    throw UserError("trainable weights: expected an FP32 master of " + std::to_string(layout_.total) +
                    (lora ? " elements (the adapters)" : " elements"));
  if (lora && (base.weights.scalar_type() != torch::kFloat32 ||
               base.weights.numel() != model::llama_layout(config).total || base.weights.device() != master.device()))
    throw std::invalid_argument(
        "TrainableWeights: the frozen base must be the model's FP32 weights on the master's device");
  const int64_t world = world_of(comm_);
  if (offload_) {
    // validate() refuses these configs by key; this guards direct use.
    if (lora || fp8 || round_mode_ == precision::RoundMode::fp32 || precision_.analog_mantissa_bits > 0)
      throw UserError("precision.offload: optimizer trains every parameter in fp16, bf16, bf16_sr or fp16_sr");
    if (world > 1)
      throw UserError("precision.offload: optimizer runs at world size 1 (WORLD_SIZE is " + std::to_string(world) +
                      "); sharding the state over ranks (ZeRO-1) is the multi-GPU way to shrink it");
    if (!master.is_cpu()) throw std::invalid_argument("TrainableWeights: an offloaded master must be on the CPU");
  } else if (master.device() != device_) {
    throw std::invalid_argument("TrainableWeights: the master must be on the model's device unless offloaded");
  }
  if (device_.is_cuda()) {
    if (!cuda_compiled())
      throw UserError("trainable weights: the model is on " + device_.str() +
                      " but this build has no CUDA kernels (configure with UNSTUCK_CUDA=ON)");
    if (world > 1 && std::string(comm_->backend_name()) != "nccl")
      throw UserError(std::string("trainable weights on ") + device_.str() + " need dist.backend nccl, not " +
                      comm_->backend_name() + " (Gloo moves host buffers only)");
  } else if (!device_.is_cpu()) {
    throw UserError("trainable weights: unsupported device " + device_.str() + " (cpu or cuda)");
  }
  if (const std::string cpu_only = cpu_only_precision(precision_); !cpu_only.empty() && !device_.is_cpu())
    throw UserError(cpu_only + ", and the model is on " + device_.str() + ": set run.device: cpu");
}

void TrainableWeights::allocate(torch::Tensor master) {
  master = master.contiguous();
  const int64_t world = world_of(comm_), rank = comm_ ? comm_->rank() : 0;
  total_ = layout_.total;
  const int64_t blocks = (total_ + kNormBlock - 1) / kNormBlock;
  shard_size_ = (blocks + world - 1) / world * kNormBlock;
  shard_begin_ = std::min(rank * shard_size_, total_);
  owned_ = std::min(shard_size_, total_ - shard_begin_);
  // The caller's buffer is adopted when nothing else refers to it (it was moved in); a shard, or a
  // buffer someone else still sees, is copied.
  const bool adopt =
      world == 1 && master.use_count() == 1 && master.storage().use_count() == 1 && master.storage_offset() == 0;
  const bool fp32 = round_mode_ == precision::RoundMode::fp32;
  if (fp32 && world == 1) {
    // FP32 compute weights equal the master: one buffer serves both.
    master_ = adopt ? master : master.clone();
    compute_all_ = master_;
  } else if (fp32) {
    compute_all_ = padded(master, world * shard_size_);
    master_ = compute_all_.narrow(0, shard_begin_, owned_);
  } else {
    master_ = adopt ? master : master.narrow(0, shard_begin_, owned_).clone();
    compute_all_ = model::lazy_zeros(world * shard_size_, compute_dtype(round_mode_), device_);
  }
  // Zeros whose pages are touched when first used (the first backward and optimizer step), not
  // here: gigabytes at a real model's size that would otherwise delay the first rollout token.
  exp_avg_ = model::lazy_zeros(master_.numel(), torch::kFloat32, master_.device());
  exp_avg_sq_ = model::lazy_zeros(master_.numel(), torch::kFloat32, master_.device());
  grad_ = model::lazy_zeros(world * shard_size_, torch::kFloat32, device_);
  grad_shard_ = world == 1 ? grad_ : model::lazy_zeros(shard_size_, torch::kFloat32, device_);
  compute_ = compute_all_.narrow(0, 0, total_);
  scratch_ = torch::empty({std::min(kSliceElems, std::max<int64_t>(owned_, 1))}, compute_all_.options());
  if (offload_) {  // pinned on a GPU, so the copies run at the link's speed
    const auto host = torch::TensorOptions().device(torch::kCPU).pinned_memory(device_.is_cuda());
    stage_grad_ = torch::empty({scratch_.numel()}, host.dtype(torch::kFloat32));
    stage_compute_ = torch::empty({scratch_.numel()}, host.dtype(compute_all_.scalar_type()));
  }
  if (format_->deferred()) discard_ = torch::empty({scratch_.numel()}, compute_all_.options());
  format_->rescale(master.data_ptr<float>(), 0, std::size_t(total_), {});  // the start master's scales
  if (!fp32) materialize_compute(master);
}

void TrainableWeights::build_model(const model::ModelConfig& config, FrozenBase base) {
  const torch::ScalarType forward = train::forward_dtype(precision_, device_.is_cuda());
  forward_ = forward != compute_.scalar_type() ? compute_.to(forward) : compute_;
  const bool lora = base.weights.defined();
  if (lora) {
    // The base is frozen (no gradient is taken for it); the adapters' gradients arrive in their
    // .grad and the hooks move them into the flat gradient.
    model_ = std::make_unique<model::LlamaModel>(
        config, frozen_base_weights(std::move(base.weights), precision_, forward_.scalar_type()));
    model_->set_adapters(base.spec, forward_);
    for (const torch::Tensor& p : model_->adapter_parameters()) p.requires_grad_(true);
  } else {
    model_ = std::make_unique<model::LlamaModel>(config, forward_);
    model_->set_requires_grad(true);
  }
  for (std::size_t i = 0; i < trainable_params().size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(trainable_params()[i], std::make_unique<FlatGradHook>(this, i));
  // The backward adds the matrices', biases' and the embedding's gradients straight into the flat
  // gradient (no per-parameter gradient of their size exists); the norms arrive through the hooks.
  if (!lora) model_->set_gradient_buffer(grad_.narrow(0, 0, total_));
}

TrainableWeights::~TrainableWeights() {
  if (!model_) return;
  for (const torch::Tensor& p : trainable_params()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void TrainableWeights::materialize_slice(const float* master, int64_t begin, int64_t n, void* out, int64_t step,
                                         const Fp8Channels* scales) const {
  materialize_compute_slice(precision_, rounding_seed_, master, begin, n, out, step,
                            scales ? scales : format_->scales());
}

std::unique_ptr<precision::WeightFormat> TrainableWeights::host_format() const {
  return precision::WeightFormat::make(precision_, rounding_seed_, precision::Place{}, layout_.fp8_matrices());
}

void TrainableWeights::restore(const torch::Tensor& master, const torch::Tensor& exp_avg,
                               const torch::Tensor& exp_avg_sq, int64_t optimizer_steps,
                               const precision::LossScalerState& scaler) {
  for (const torch::Tensor* t : {&master, &exp_avg, &exp_avg_sq})
    if (t->numel() != total_)
      throw UserError("checkpoint state has " + std::to_string(t->numel()) + " elements, the model " +
                      std::to_string(total_) + " (a different model?)");
  const auto read = [&](const std::string& name, int64_t begin, int64_t n, float* out) {
    const torch::Tensor& src = name == "master" ? master : name == "exp_avg" ? exp_avg : exp_avg_sq;
    torch::from_blob(out, {n}, torch::kFloat32).copy_(src.reshape({-1}).narrow(0, begin, n));
  };
  restore(read, optimizer_steps, scaler);
}

void TrainableWeights::restore(const BufferReader& read, int64_t optimizer_steps,
                               const precision::LossScalerState& scaler) {
  torch::NoGradGuard no_grad;
  const int64_t slice = std::min(kSliceElems, std::max<int64_t>(total_, 1));
  const torch::Tensor host = torch::empty({slice}, torch::kFloat32);  // one bounded staging buffer
  // This rank's shard of each buffer, a slice at a time (read straight into host buffers).
  for (auto [name, dst] : {std::pair<const char*, torch::Tensor*>{"master", &master_},
                           {"exp_avg", &exp_avg_},
                           {"exp_avg_sq", &exp_avg_sq_}})
    for (int64_t i = 0; i < owned_; i += slice) {
      const int64_t n = std::min(slice, owned_ - i);
      if (dst->is_cpu()) {
        read(name, shard_begin_ + i, n, dst->data_ptr<float>() + i);
      } else {
        read(name, shard_begin_ + i, n, host.data_ptr<float>());
        dst->narrow(0, i, n).copy_(host.narrow(0, 0, n));
      }
    }
  grad_.zero_();
  adam_step_ = optimizer_steps;
  scaler_->load_state(scaler);
  // The compute weights of the whole model, regenerated from the master a slice at a time with the
  // key of this optimizer step: bit-identical to the saved run's. (In fp32 mode at world size 1 the
  // master read above is already them.)
  format_->rescale([&](int64_t b, int64_t n, float* out) { read("master", b, n, out); }, total_);
  if (!(master_is_compute() && world_of(comm_) == 1)) {
    const torch::Tensor bits = torch::empty({slice}, compute_.options().device(torch::kCPU));
    for (int64_t b = 0; b < total_; b += slice) {
      const int64_t n = std::min(slice, total_ - b);
      read("master", b, n, host.data_ptr<float>());
      materialize_slice(host.data_ptr<float>(), b, n, bits.data_ptr(), adam_step_);
      compute_.narrow(0, b, n).copy_(bits.narrow(0, 0, n));
    }
  }
  refresh_forward_weights();
}

FullOptimizerState TrainableWeights::gather_state() const {
  if (world_of(comm_) == 1) return {master_, exp_avg_, exp_avg_sq_};
  const auto gather = [&](const torch::Tensor& shard) {
    const torch::Tensor mine = padded(shard, shard_size_);
    torch::Tensor all = torch::empty({comm_->world_size() * shard_size_}, shard.options());
    comm_->all_gather(mine.data_ptr<float>(), all.data_ptr<float>(), std::size_t(shard_size_), dist::DataType::f32);
    return all.narrow(0, 0, total_);
  };
  return {gather(master_), gather(exp_avg_), gather(exp_avg_sq_)};
}

void TrainableWeights::refresh_forward_weights() {
  if (forward_.data_ptr() != compute_.data_ptr()) forward_.copy_(compute_);
}

precision::SliceTensors TrainableWeights::slice_tensors(int64_t begin, int64_t n) const {
  precision::SliceTensors slice{uint64_t(begin), std::size_t(n), {}, {}};
  for (std::size_t i = 0; i < layout().entries.size(); ++i) {
    const model::ParamEntry& e = layout().entries[i];
    const int64_t b = std::max(e.offset, begin), end = std::min(e.offset + e.numel, begin + n);
    if (b >= end) continue;
    slice.segments.push_back({uint64_t(b), uint64_t(end - b), e.decay});
    slice.tensor.push_back(i);
  }
  return slice;
}

void TrainableWeights::count_changes(const precision::SliceTensors& slice, const torch::Tensor& before,
                                     const torch::Tensor& after, StepCounts& counts) const {
  const std::size_t block0 = std::size_t((int64_t(slice.begin) - shard_begin_) / kNormBlock);
  precision::count_slice_changes(round_mode_, place_of(device_), slice, before.data_ptr(), after.data_ptr(),
                                 std::size_t(kNormBlock), counts.changed, counts.delta.data() + block0,
                                 counts.weight.data() + block0, {precision_.threads});
}

void TrainableWeights::update_slice(int64_t begin, int64_t n, const precision::AdamWHyper& hyper, StepCounts& counts) {
  const int64_t at = begin - shard_begin_;
  const precision::SliceTensors slice = slice_tensors(begin, n);
  const torch::Tensor before = scratch_.narrow(0, 0, n), after = compute_all_.narrow(0, begin, n);
  precision::AdamWBuffers buffers{master_.data_ptr<float>() + at,
                                  grad_shard_.data_ptr<float>() + at,
                                  exp_avg_.data_ptr<float>() + at,
                                  exp_avg_sq_.data_ptr<float>() + at,
                                  after.data_ptr(),
                                  uint64_t(begin)};
  if (format_->deferred()) {  // the compute weights are rounded after every slice is updated
    buffers.compute = discard_.data_ptr();
    return format_->update(buffers, std::size_t(n), slice.segments, hyper, uint64_t(adam_step_));
  }
  before.copy_(after);
  if (offload_) {
    // The slice's gradient to the host, the update on the host buffers, its compute weights back to
    // the device; the counts on the device as without.
    stage_grad_.narrow(0, 0, n).copy_(grad_shard_.narrow(0, at, n));
    buffers.grad = stage_grad_.data_ptr<float>();
    buffers.compute = stage_compute_.data_ptr();
    format_->update(buffers, std::size_t(n), slice.segments, hyper, uint64_t(adam_step_));
    after.copy_(stage_compute_.narrow(0, 0, n));
  } else {
    format_->update(buffers, std::size_t(n), slice.segments, hyper, uint64_t(adam_step_));
  }
  count_changes(slice, before, after, counts);
}

void TrainableWeights::round_deferred(StepCounts& counts) {
  precision::WeightFormat::Combine max_over_ranks;
  if (world_of(comm_) > 1)  // a row split between shards: the max of the parts (exact)
    max_over_ranks = [this](float* values, std::size_t n) {
      const torch::Tensor mine = torch::from_blob(values, {int64_t(n)}, master_.options());
      const torch::Tensor all = torch::empty({comm_->world_size(), int64_t(n)}, master_.options());
      comm_->all_gather(values, all.data_ptr<float>(), n, dist::DataType::f32);
      mine.copy_(all.amax(0));
    };
  format_->rescale(master_.data_ptr<float>(), uint64_t(shard_begin_), std::size_t(owned_), max_over_ranks);
  for (int64_t begin = shard_begin_; begin < shard_begin_ + owned_; begin += kSliceElems) {
    const int64_t n = std::min(kSliceElems, shard_begin_ + owned_ - begin);
    const torch::Tensor before = scratch_.narrow(0, 0, n), after = compute_all_.narrow(0, begin, n);
    before.copy_(after);
    format_->materialize(master_.data_ptr<float>() + (begin - shard_begin_), uint64_t(begin), std::size_t(n),
                         after.data_ptr(), uint64_t(adam_step_));
    count_changes(slice_tensors(begin, n), before, after, counts);
  }
}

OptimizerStepStats TrainableWeights::optimizer_step(const precision::OptimConfig& optim, double lr) {
  OptimizerStepStats stats;
  stats.loss_scale = scaler_->scale();
  const int64_t world = world_of(comm_);
  // ---- reduce: one reduce-scatter of the whole flat gradient onto the shards
  if (world > 1)
    comm_->reduce_scatter_sum(grad_.data_ptr<float>(), grad_shard_.data_ptr<float>(), std::size_t(shard_size_),
                              dist::DataType::f32);
  const bool overflow = any_nonfinite_grad();
  if (overflow && !precision::uses_loss_scaling(precision_.mode)) throw_nonfinite_grad();
  if (overflow) {
    scaler_->update(true);
    grad_.zero_();
    stats.skipped = true;
    return stats;
  }
  const double inv_scale = 1.0 / stats.loss_scale;
  stats.grad_norm = reduced_grad_norm() * inv_scale;
  double clip = 1.0;
  if (optim.grad_clip > 0 && stats.grad_norm > optim.grad_clip) clip = optim.grad_clip / stats.grad_norm;

  // ---- update this rank's shard; the fused kernel writes master, moments and compute weights
  ++adam_step_;
  precision::AdamWHyper hyper;
  hyper.lr = lr;
  hyper.beta1 = optim.beta1;
  hyper.beta2 = optim.beta2;
  hyper.eps = optim.eps;
  hyper.weight_decay = optim.weight_decay;
  hyper.step = adam_step_;
  hyper.grad_scale = inv_scale * clip;
  StepCounts counts{std::vector<int64_t>(layout().entries.size(), 0), {}, {}};
  counts.delta.assign(std::size_t(shard_size_ / kNormBlock), 0.0);  // per block of this rank's shard
  counts.weight = counts.delta;
  for (int64_t begin = shard_begin_; begin < shard_begin_ + owned_; begin += kSliceElems)
    update_slice(begin, std::min(kSliceElems, shard_begin_ + owned_ - begin), hyper, counts);
  if (format_->deferred()) round_deferred(counts);
  stats.update_sumsq = global_block_sum(counts.delta);
  stats.weight_sumsq = global_block_sum(counts.weight);

  // ---- gather: every rank gets the full rounded compute weights and the sticking counts
  if (world > 1) {
    const torch::Tensor mine = compute_all_.narrow(0, comm_->rank() * shard_size_, shard_size_).clone();
    comm_->all_gather(mine.data_ptr(), compute_all_.data_ptr(), std::size_t(shard_size_) * compute_all_.element_size(),
                      dist::DataType::u8);
    comm_->all_reduce_sum(counts.changed.data(), counts.changed.size());
  }
  stats.changed_per_tensor.assign(counts.changed.begin(), counts.changed.end());
  for (int64_t c : counts.changed) stats.changed += uint64_t(c);
  for (const model::ParamEntry& e : layout().entries) stats.elements += uint64_t(e.numel);  // no alignment gaps
  grad_.zero_();
  refresh_forward_weights();
  scaler_->update(false);
  return stats;
}

}  // namespace unstuck::train
