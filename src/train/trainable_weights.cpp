// Flat trainable state: gradient collection, loss-scaler handling, clipping and the fused AdamW step
// that rounds the master into the compute weights; with several ranks, the ZeRO-1 sharding of that
// step (reduce-scatter of the gradient, update of the own shard, all-gather of the compute weights).
// A master on a CUDA device keeps every buffer there and runs the CUDA kernels (same bits).
#include "unstuck/train/trainable_weights.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>

#include <cmath>

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#if defined(UNSTUCK_HAVE_CUDA)
#include "unstuck/precision/cuda_kernels.h"
#endif

namespace unstuck::train {
namespace {

// The gradient norm is summed per block of this many global elements (in double), then over the
// blocks in order. Shards start at block boundaries, so the sum does not depend on the world size.
constexpr int64_t kNormBlock = 1 << 14;

int64_t world_of(const dist::Communicator* comm) { return comm ? comm->world_size() : 1; }

torch::Tensor padded(const torch::Tensor& t, int64_t n) {
  torch::Tensor out = torch::zeros({n}, t.options());
  out.narrow(0, 0, t.numel()).copy_(t);
  return out;
}

}  // namespace

torch::ScalarType compute_dtype(precision::RoundMode mode) {
  switch (mode) {
    case precision::RoundMode::fp32: return torch::kFloat32;
    case precision::RoundMode::bf16_rn:
    case precision::RoundMode::bf16_sr: return torch::kBFloat16;
    case precision::RoundMode::fp16_rn:
    case precision::RoundMode::fp16_sr: return torch::kHalf;
  }
  return torch::kFloat32;
}

torch::Tensor round_base_to_grid(const torch::Tensor& master, int analog_mantissa_bits) {
  if (analog_mantissa_bits == 0) return master.to(torch::kBFloat16).to(torch::kFloat32);
  const torch::Tensor host = master.to(torch::kCPU, torch::kFloat32).contiguous();
  torch::Tensor bits = torch::empty({host.numel()}, host.options().dtype(torch::kBFloat16));
  precision::materialize_coarse_bf16(host.data_ptr<float>(), static_cast<uint16_t*>(bits.data_ptr()),
                                     std::size_t(host.numel()), analog_mantissa_bits, false, {});
  return bits.to(torch::kFloat32).view(master.sizes()).to(master.device());
}

bool TrainableWeights::on_device() const { return master_.is_cuda(); }

bool TrainableWeights::analog_grid() const {
  return precision_.analog_mantissa_bits > 0 &&
         (round_mode_ == precision::RoundMode::bf16_rn || round_mode_ == precision::RoundMode::bf16_sr);
}

void TrainableWeights::materialize_analog(const float* master_data, int64_t begin, int64_t n) {
  precision::materialize_coarse_bf16(master_data, static_cast<uint16_t*>(compute_all_.data_ptr()) + begin,
                                     std::size_t(n), precision_.analog_mantissa_bits,
                                     round_mode_ == precision::RoundMode::bf16_sr,
                                     {rounding_seed_, uint64_t(adam_step_)}, uint64_t(begin), {precision_.threads});
}

void TrainableWeights::materialize_compute(const torch::Tensor& full_master) {
  if (analog_grid()) return materialize_analog(full_master.data_ptr<float>(), 0, total_);
  const precision::SrKey key{rounding_seed_, uint64_t(adam_step_)};
  if (on_device()) {
#if defined(UNSTUCK_HAVE_CUDA)
    // Our kernels run on the current device: make it the master's. The legacy default stream is
    // libtorch's current stream unless a caller set another.
    const c10::DeviceGuard on_master(master_.device());
    precision::materialize_cuda(full_master.data_ptr<float>(), compute_.data_ptr(), std::size_t(total_),
                                round_mode_, key, 0, nullptr);
#endif
    return;
  }
  precision::materialize(full_master.data_ptr<float>(), compute_.data_ptr(), std::size_t(total_), round_mode_,
                         key, 0, {precision_.threads});
}

TrainableWeights::TrainableWeights(const model::ModelConfig& config, torch::Tensor master,
                                   const precision::PrecisionConfig& precision,
                                   uint64_t rounding_seed, dist::Communicator* comm)
    : precision_(precision),
      round_mode_(precision::round_mode_for(precision.mode)),
      rounding_seed_(rounding_seed),
      comm_(comm) {
  if (precision.compute == precision::ComputeMode::auto_)
    throw std::invalid_argument("TrainableWeights: resolve precision.compute auto first (train::resolve_compute)");
  const model::ParamLayout layout = model::llama_layout(config);
  if (master.scalar_type() != torch::kFloat32 || master.numel() != layout.total)
    throw UserError("trainable weights: expected an FP32 master of " + std::to_string(layout.total) +
                    " elements");
  master = master.contiguous();
  const int64_t world = world_of(comm_), rank = comm_ ? comm_->rank() : 0;
  if (master.is_cuda()) {
    if (!cuda_compiled())
      throw UserError("trainable weights: the master is on " + master.device().str() +
                      " but this build has no CUDA kernels (configure with UNSTUCK_CUDA=ON)");
    if (world > 1 && std::string(comm_->backend_name()) != "nccl")
      throw UserError(std::string("trainable weights on ") + master.device().str() + " need dist.backend nccl, not " +
                      comm_->backend_name() + " (Gloo moves host buffers only)");
  } else if (!master.is_cpu()) {
    throw UserError("trainable weights: unsupported device " + master.device().str() + " (cpu or cuda)");
  }
  if (precision.analog_mantissa_bits > 0 && !master.is_cpu())
    throw UserError("precision.analog_mantissa_bits (the grid-scaled analog) runs on the CPU only, and the master "
                    "is on " + master.device().str() + ": set run.device: cpu");
  const torch::TensorOptions f32 = torch::TensorOptions().dtype(torch::kFloat32).device(master.device());
  total_ = layout.total;
  const int64_t blocks = (total_ + kNormBlock - 1) / kNormBlock;
  shard_size_ = (blocks + world - 1) / world * kNormBlock;
  shard_begin_ = std::min(rank * shard_size_, total_);
  owned_ = std::min(shard_size_, total_ - shard_begin_);
  master_ = master.narrow(0, shard_begin_, owned_).clone();
  exp_avg_ = torch::zeros_like(master_);
  exp_avg_sq_ = torch::zeros_like(master_);
  grad_ = torch::zeros({world * shard_size_}, f32);
  grad_shard_ = world == 1 ? grad_ : torch::zeros({shard_size_}, f32);
  compute_all_ = torch::zeros({world * shard_size_}, f32.dtype(compute_dtype(round_mode_)));
  compute_ = compute_all_.narrow(0, 0, total_);
  materialize_compute(master);
  // FP16 has no fast CPU kernels: compute in FP32 on the FP16-rounded weights (DESIGN.md). CUDA
  // computes in FP16 natively.
  const bool fp32_forward = precision_.compute == precision::ComputeMode::fp32 ||
                            (compute_.scalar_type() == torch::kHalf && !master.is_cuda());
  forward_ = fp32_forward && compute_.scalar_type() != torch::kFloat32 ? compute_.to(torch::kFloat32)
                                                                       : compute_;
  model_ = std::make_unique<model::LlamaModel>(config, forward_);
  model_->set_requires_grad(true);
  if (precision::uses_loss_scaling(precision_.mode))
    scaler_ = std::make_unique<precision::DynamicLossScaler>(precision_.loss_scale);
  else
    scaler_ = std::make_unique<precision::ConstantLossScaler>(1.0);
}

void TrainableWeights::restore(const torch::Tensor& master, const torch::Tensor& exp_avg,
                               const torch::Tensor& exp_avg_sq, int64_t optimizer_steps,
                               const precision::LossScalerState& scaler) {
  for (const torch::Tensor* t : {&master, &exp_avg, &exp_avg_sq})
    if (t->numel() != total_)
      throw UserError("checkpoint state has " + std::to_string(t->numel()) + " elements, the model " +
                      std::to_string(total_) + " (a different model?)");
  torch::NoGradGuard no_grad;
  master_.copy_(master.narrow(0, shard_begin_, owned_));
  exp_avg_.copy_(exp_avg.narrow(0, shard_begin_, owned_));
  exp_avg_sq_.copy_(exp_avg_sq.narrow(0, shard_begin_, owned_));
  grad_.zero_();
  adam_step_ = optimizer_steps;
  scaler_->load_state(scaler);
  materialize_compute(master.to(master_.device()).contiguous());
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

void TrainableWeights::accumulate_grads() {
  torch::NoGradGuard no_grad;
  const auto& params = model_->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    torch::Tensor g = params[i].grad();
    if (!g.defined()) continue;
    const model::ParamEntry& e = layout().entries[i];
    grad_.narrow(0, e.offset, e.numel).add_(g.reshape({-1}).to(torch::kFloat32));
    params[i].mutable_grad().reset();
  }
}

void TrainableWeights::add_flat_grad(const torch::Tensor& grad) {
  if (grad.numel() != total_) throw std::invalid_argument("add_flat_grad: expected layout.total elements");
  torch::NoGradGuard no_grad;
  grad_.narrow(0, 0, total_).add_(grad.reshape({-1}).to(torch::kFloat32));
}

double TrainableWeights::reduced_grad_norm() const {
  const int64_t blocks = shard_size_ / kNormBlock;
  if (on_device()) return std::sqrt(device_grad_sumsq(blocks));
  std::vector<double> partial(std::size_t(blocks), 0.0);
  const float* g = grad_shard_.data_ptr<float>();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s = 0;
      for (int64_t i = b * kNormBlock; i < (b + 1) * kNormBlock; ++i) s += double(g[i]) * double(g[i]);
      partial[std::size_t(b)] = s;
    }
  });
  std::vector<double> all(std::size_t(blocks * world_of(comm_)));
  if (comm_) comm_->all_gather(partial.data(), all.data(), partial.size(), dist::DataType::f64);
  else all = partial;
  double sum = 0;
  for (double x : all) sum += x;
  return std::sqrt(sum);
}

// Device path of reduced_grad_norm(): per-block sums on the device (fixed order), gathered over the
// ranks on the device, then one copy of the (W * blocks) partial sums to the host, summed in the
// same order as on the CPU.
double TrainableWeights::device_grad_sumsq(int64_t blocks) const {
  torch::Tensor partial = torch::empty({blocks}, grad_shard_.options().dtype(torch::kFloat64));
#if defined(UNSTUCK_HAVE_CUDA)
  const c10::DeviceGuard on_master(master_.device());
  precision::block_sumsq_cuda(grad_shard_.data_ptr<float>(), std::size_t(blocks), std::size_t(kNormBlock),
                              partial.data_ptr<double>(), nullptr);
#endif
  torch::Tensor all = partial;
  if (world_of(comm_) > 1) {
    all = torch::empty({blocks * world_of(comm_)}, partial.options());
    comm_->all_gather(partial.data_ptr<double>(), all.data_ptr<double>(), std::size_t(blocks), dist::DataType::f64);
  }
  const torch::Tensor host = all.cpu();
  const double* p = host.data_ptr<double>();
  double sum = 0;
  for (int64_t i = 0; i < host.numel(); ++i) sum += p[i];
  return sum;
}

bool TrainableWeights::any_nonfinite_grad() const {
  bool mine = false;
  if (on_device()) {
#if defined(UNSTUCK_HAVE_CUDA)
    const c10::DeviceGuard on_master(master_.device());
    mine = precision::count_nonfinite_cuda(grad_shard_.data_ptr<float>(), std::size_t(owned_), nullptr) > 0;
#endif
  } else {
    mine = precision::found_nonfinite(grad_shard_.data_ptr<float>(), std::size_t(owned_), {precision_.threads});
  }
  return comm_ && comm_->world_size() > 1 ? comm_->any(mine) : mine;
}

void TrainableWeights::throw_nonfinite_grad() const {
  const std::string where = " at optimizer step " + std::to_string(adam_step_ + 1) + " (precision.mode " +
                            precision::round_mode_name(round_mode_) +
                            " has no loss scaling; lower optim.lr or use a loss-scaled mode)";
  for (const model::ParamEntry& e : layout().entries) {
    const int64_t begin = std::max(e.offset, shard_begin_), end = std::min(e.offset + e.numel, shard_begin_ + owned_);
    if (begin < end && !torch::isfinite(grad_shard_.narrow(0, begin - shard_begin_, end - begin)).all().item<bool>())
      throw UserError("non-finite gradient in tensor '" + e.name + "'" + where);
  }
  throw UserError("non-finite gradient in another rank's shard (its log names the tensor)" + where);
}

std::vector<precision::Segment> TrainableWeights::shard_segments(std::vector<std::size_t>* tensor_index) const {
  std::vector<precision::Segment> out;
  const auto& entries = layout().entries;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const int64_t begin = std::max(entries[i].offset, shard_begin_);
    const int64_t end = std::min(entries[i].offset + entries[i].numel, shard_begin_ + owned_);
    if (begin >= end) continue;
    out.push_back({uint64_t(begin), uint64_t(end - begin), entries[i].decay});
    tensor_index->push_back(i);
  }
  return out;
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
  const std::size_t compute_bytes = compute_all_.element_size();
  const precision::AdamWBuffers buffers{master_.data_ptr<float>(), grad_shard_.data_ptr<float>(),
                                        exp_avg_.data_ptr<float>(), exp_avg_sq_.data_ptr<float>(),
                                        static_cast<char*>(compute_all_.data_ptr()) + shard_begin_ * compute_bytes,
                                        uint64_t(shard_begin_)};
  std::vector<std::size_t> tensor_index;
  const std::vector<precision::Segment> segments = shard_segments(&tensor_index);
  const precision::SrKey key{rounding_seed_, uint64_t(adam_step_)};
  // The analog grid: the fused step writes BF16, then the shard is rounded onto the analog grid and
  // its changes are counted against the previous analog weights.
  const torch::Tensor analog_before =
      analog_grid() ? compute_all_.narrow(0, shard_begin_, owned_).clone() : torch::Tensor();
  precision::AdamWStepStats s;
  if (on_device()) {
#if defined(UNSTUCK_HAVE_CUDA)
    const c10::DeviceGuard on_master(master_.device());
    s = precision::fused_adamw_cuda(buffers, segments, hyper, round_mode_, key, nullptr);
#endif
  } else {
    s = precision::fused_adamw_step(buffers, segments, hyper, round_mode_, key, {precision_.threads});
  }
  if (analog_before.defined()) {
    materialize_analog(master_.data_ptr<float>(), shard_begin_, owned_);
    const uint16_t* before = static_cast<const uint16_t*>(analog_before.data_ptr());
    const uint16_t* after = static_cast<const uint16_t*>(compute_all_.data_ptr()) + shard_begin_;
    for (std::size_t k = 0; k < segments.size(); ++k) {
      const uint64_t first = segments[k].offset - uint64_t(shard_begin_);
      uint64_t n = 0;
      for (uint64_t i = first; i < first + segments[k].size; ++i) n += before[i] != after[i];
      s.changed[k] = n;
    }
  }
  std::vector<int64_t> changed(layout().entries.size(), 0);
  for (std::size_t k = 0; k < segments.size(); ++k) changed[tensor_index[k]] += int64_t(s.changed[k]);

  // ---- gather: every rank gets the full rounded compute weights and the sticking counts
  if (world > 1) {
    const torch::Tensor mine = compute_all_.narrow(0, comm_->rank() * shard_size_, shard_size_).clone();
    comm_->all_gather(mine.data_ptr(), compute_all_.data_ptr(), std::size_t(shard_size_) * compute_bytes,
                      dist::DataType::u8);
    comm_->all_reduce_sum(changed.data(), changed.size());
  }
  stats.changed_per_tensor.assign(changed.begin(), changed.end());
  for (std::size_t i = 0; i < changed.size(); ++i) stats.changed += uint64_t(changed[i]);
  for (const model::ParamEntry& e : layout().entries) stats.elements += uint64_t(e.numel);  // no alignment gaps
  grad_.zero_();
  refresh_forward_weights();
  scaler_->update(false);
  return stats;
}

}  // namespace unstuck::train
