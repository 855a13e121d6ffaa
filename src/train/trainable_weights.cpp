// Flat trainable state: gradient collection, loss-scaler handling, clipping and the fused AdamW step
// that rounds the master into the compute weights; with several ranks, the ZeRO-1 sharding of that
// step (reduce-scatter of the gradient, update of the own shard, all-gather of the compute weights).
// A master on a CUDA device keeps every buffer there and runs the CUDA kernels (same bits).
#include "unstuck/train/trainable_weights.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/model/lazy_zeros.h"
#include "unstuck/precision/fp8.h"
#include "unstuck/precision/update_stats.h"
#if defined(UNSTUCK_HAVE_CUDA)
#include "unstuck/precision/cuda_kernels.h"
#endif

namespace unstuck::train {
namespace {

// The gradient norm is summed per block of this many global elements (in double), then over the
// blocks in order. Shards start at block boundaries, so the sum does not depend on the world size.
constexpr int64_t kNormBlock = 1 << 14;
// The optimizer updates this many elements at a time (a multiple of kNormBlock), saving their old
// compute weights first: the update statistics need the old values, never a copy of the model.
constexpr int64_t kSliceElems = 1 << 22;
// A parameter's gradient is added into the flat FP32 gradient this many elements at a time (the
// widening of a BF16 gradient makes an FP32 temporary of that size, not of the whole tensor).
constexpr int64_t kGradSliceElems = 1 << 22;

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

int64_t world_of(const dist::Communicator* comm) { return comm ? comm->world_size() : 1; }

torch::Tensor padded(const torch::Tensor& t, int64_t n) {
  torch::Tensor out = model::lazy_zeros(n, t.scalar_type(), t.device());
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

void round_base_to_grid(float* x, int64_t n, int analog_mantissa_bits) {
  torch::Tensor bits = torch::empty({std::min(n, kSliceElems)}, torch::kBFloat16);
  for (int64_t i = 0; i < n; i += kSliceElems) {
    const int64_t len = std::min(kSliceElems, n - i);
    const torch::Tensor slice = torch::from_blob(x + i, {len}, torch::kFloat32);
    if (analog_mantissa_bits == 0) {
      bits.narrow(0, 0, len).copy_(slice);
    } else {
      precision::materialize_coarse_bf16(x + i, static_cast<uint16_t*>(bits.data_ptr()), std::size_t(len),
                                         analog_mantissa_bits, false, {});
    }
    slice.copy_(bits.narrow(0, 0, len));
  }
}

void round_base_to_grid_(torch::Tensor& master, int analog_mantissa_bits) {
  if (master.scalar_type() != torch::kFloat32 || !master.is_contiguous())
    throw std::invalid_argument("round_base_to_grid_: expected a contiguous FP32 tensor");
  if (master.is_cpu()) return round_base_to_grid(master.data_ptr<float>(), master.numel(), analog_mantissa_bits);
  torch::Tensor flat = master.view({-1});
  for (int64_t i = 0; i < flat.numel(); i += kSliceElems) {
    torch::Tensor slice = flat.narrow(0, i, std::min(kSliceElems, flat.numel() - i));
    slice.copy_(round_base_to_grid(slice, analog_mantissa_bits));
  }
}

namespace {

// The channels' exponents from their maxima (n floats in host memory).
void set_fp8_exponents(const float* amax, std::size_t n, std::vector<int32_t>& exponent) {
  exponent.resize(n);
  for (std::size_t i = 0; i < n; ++i) exponent[i] = precision::fp8_scale_exponent(amax[i]);
}
void set_fp8_exponents(const std::vector<float>& amax, std::vector<int32_t>& exponent) {
  set_fp8_exponents(amax.data(), amax.size(), exponent);
}
// The same from a float tensor of maxima on any device.
void set_fp8_exponents(const torch::Tensor& amax, std::vector<int32_t>& exponent) {
  const torch::Tensor host = amax.cpu().contiguous();
  set_fp8_exponents(host.data_ptr<float>(), std::size_t(host.numel()), exponent);
}

}  // namespace

Fp8Channels fp8_channels(const model::ParamLayout& layout, const std::function<void(int64_t, int64_t, float*)>& read,
                         int threads) {
  Fp8Channels c;
  c.matrices = layout.fp8_matrices();
  std::vector<float> amax(precision::fp8_channel_count(c.matrices), 0.0f);
  const int64_t slice = std::min(kSliceElems, std::max<int64_t>(layout.total, 1));
  std::vector<float> host(static_cast<std::size_t>(slice));
  for (int64_t b = 0; b < layout.total; b += slice) {
    const int64_t n = std::min(slice, layout.total - b);
    read(b, n, host.data());
    precision::fp8_channel_amax(host.data(), std::size_t(n), uint64_t(b), c.matrices, amax.data(), {threads});
  }
  set_fp8_exponents(amax, c.exponent);
  return c;
}

Fp8Channels fp8_channels(const model::ParamLayout& layout, const float* master, int threads) {
  Fp8Channels c;
  c.matrices = layout.fp8_matrices();
  std::vector<float> amax(precision::fp8_channel_count(c.matrices), 0.0f);
  precision::fp8_channel_amax(master, std::size_t(layout.total), 0, c.matrices, amax.data(), {threads});
  set_fp8_exponents(amax, c.exponent);
  return c;
}

std::string cpu_only_precision(const precision::PrecisionConfig& precision) {
  if (precision.analog_mantissa_bits > 0)
    return "precision.analog_mantissa_bits (the grid-scaled analog) runs on the CPU only";
  return "";
}

void round_base_to_fp8(float* x, int64_t begin, int64_t n, const Fp8Channels& channels, int threads) {
  std::vector<uint16_t> bits(static_cast<std::size_t>(std::min(kSliceElems, std::max<int64_t>(n, 1))));
  for (int64_t b = 0; b < n; b += kSliceElems) {
    const int64_t m = std::min(kSliceElems, n - b);
    precision::materialize_fp8(x + b, bits.data(), std::size_t(m), uint64_t(begin + b), channels.matrices,
                               channels.exponent.data(), false, {}, {threads});
    for (int64_t i = 0; i < m; ++i) x[b + i] = precision::bf16_to_float(bits[std::size_t(i)]);
  }
}

void round_base_to_fp8_(torch::Tensor& master, const model::ParamLayout& layout, int threads) {
  if (!master.is_cpu() || master.scalar_type() != torch::kFloat32 || !master.is_contiguous())
    throw UserError("grpo.round_base_to_fp8: the base must be a contiguous FP32 buffer in host memory");
  float* x = master.data_ptr<float>();
  round_base_to_fp8(x, 0, master.numel(), fp8_channels(layout, x, threads), threads);
}

bool TrainableWeights::on_device() const { return device_.is_cuda(); }

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
  if (fp8()) return materialize_fp8_slice(full_master.data_ptr<float>(), 0, total_, compute_.data_ptr(), fp8_exponents());
  const precision::SrKey key{rounding_seed_, uint64_t(adam_step_)};
  if (offload_) {  // rounded on the host a slice at a time, then copied to the device
    for (int64_t b = 0; b < total_; b += stage_compute_.numel()) {
      const int64_t n = std::min(stage_compute_.numel(), total_ - b);
      precision::materialize(full_master.data_ptr<float>() + b, stage_compute_.data_ptr(), std::size_t(n), round_mode_,
                             key, uint64_t(b), {precision_.threads});
      compute_.narrow(0, b, n).copy_(stage_compute_.narrow(0, 0, n));
    }
    return;
  }
  if (on_device()) {
#if defined(UNSTUCK_HAVE_CUDA)
    // Our kernels run on the current device: make it the master's. The legacy default stream is
    // libtorch's current stream unless a caller set another.
    const c10::DeviceGuard on_master(device_);
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
                                   uint64_t rounding_seed, dist::Communicator* comm, FrozenBase base,
                                   std::optional<torch::Device> device)
    : precision_(precision),
      round_mode_(precision::round_mode_for(precision.mode)),
      rounding_seed_(rounding_seed),
      comm_(comm),
      device_(device.value_or(master.device())),
      offload_(precision.offload == precision::Offload::optimizer) {
  if (precision.compute == precision::ComputeMode::auto_)
    throw std::invalid_argument("TrainableWeights: resolve precision.compute auto first (train::resolve_compute)");
  const bool lora = base.weights.defined();
  if (lora && fp8())
    throw UserError(std::string("precision.mode ") + config::enum_name(precision.mode) +
                    " with lora.rank > 0: FP8 adapters are not supported");
  layout_ = lora ? model::lora_layout(config, base.spec) : model::llama_layout(config);
  const model::ParamLayout& layout = layout_;
  if (master.scalar_type() != torch::kFloat32 || master.numel() != layout.total)
    throw UserError("trainable weights: expected an FP32 master of " + std::to_string(layout.total) +
                    (lora ? " elements (the adapters)" : " elements"));
  if (lora && (base.weights.scalar_type() != torch::kFloat32 || base.weights.numel() != model::llama_layout(config).total ||
               base.weights.device() != master.device()))
    throw std::invalid_argument("TrainableWeights: the frozen base must be the model's FP32 weights on the master's device");
  master = master.contiguous();
  const int64_t world = world_of(comm_), rank = comm_ ? comm_->rank() : 0;
  if (offload_) {
    // validate() refuses these configs by key; this guards direct use.
    if (lora || fp8() || round_mode_ == precision::RoundMode::fp32 || precision.analog_mantissa_bits > 0)
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
  if (const std::string cpu_only = cpu_only_precision(precision); !cpu_only.empty() && !device_.is_cpu())
    throw UserError(cpu_only + ", and the model is on " + device_.str() + ": set run.device: cpu");
  total_ = layout.total;
  const int64_t blocks = (total_ + kNormBlock - 1) / kNormBlock;
  shard_size_ = (blocks + world - 1) / world * kNormBlock;
  shard_begin_ = std::min(rank * shard_size_, total_);
  owned_ = std::min(shard_size_, total_ - shard_begin_);
  // The caller's buffer is adopted when nothing else refers to it (it was moved in); a shard, or a
  // buffer someone else still sees, is copied.
  const bool adopt = world == 1 && master.use_count() == 1 && master.storage().use_count() == 1 &&
                     master.storage_offset() == 0;
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
  if (fp8()) {
    fp8_ = std::make_unique<Fp8Channels>();
    fp8_->matrices = layout.fp8_matrices();
    set_fp8_exponents(fp8_channel_amax(master.data_ptr<float>(), total_, 0), fp8_->exponent);
    fp8_discard_ = torch::empty({scratch_.numel()}, compute_all_.options());
  }
  if (!fp32) materialize_compute(master);
  master = torch::Tensor();  // a copied full master is released here, before the model is built
  // FP16 has no fast CPU kernels: compute in FP32 on the FP16-rounded weights (DESIGN.md). CUDA
  // computes in FP16 natively.
  const bool fp32_forward = precision_.compute == precision::ComputeMode::fp32 ||
                            (compute_.scalar_type() == torch::kHalf && !device_.is_cuda());
  forward_ = fp32_forward && compute_.scalar_type() != torch::kFloat32 ? compute_.to(torch::kFloat32)
                                                                       : compute_;
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
  if (precision::uses_loss_scaling(precision_.mode))
    scaler_ = std::make_unique<precision::DynamicLossScaler>(precision_.loss_scale);
  else
    scaler_ = std::make_unique<precision::ConstantLossScaler>(1.0);
}

TrainableWeights::~TrainableWeights() {
  if (!model_) return;
  for (const torch::Tensor& p : trainable_params()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

torch::Tensor frozen_base_weights(torch::Tensor base, const precision::PrecisionConfig& precision,
                                  torch::ScalarType forward) {
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = compute_dtype(precision::round_mode_for(precision.mode));
  if (dtype == torch::kBFloat16 && precision.analog_mantissa_bits > 0)
    round_base_to_grid_(base, precision.analog_mantissa_bits);
  torch::Tensor rounded = dtype == base.scalar_type() ? std::move(base) : base.to(dtype);  // to nearest
  base = torch::Tensor();  // the FP32 base is released before a widened copy is made
  return rounded.scalar_type() == forward ? rounded : rounded.to(forward);
}

void materialize_compute_slice(const precision::PrecisionConfig& precision, uint64_t rounding_seed, const float* master,
                               int64_t begin, int64_t n, void* out, int64_t step, const Fp8Channels* fp8) {
  const precision::RoundMode mode = precision::round_mode_for(precision.mode);
  const precision::SrKey key{rounding_seed, uint64_t(step)};
  if (precision::is_fp8(precision.mode)) {
    if (!fp8) throw std::invalid_argument("materialize_compute_slice: an FP8 mode needs the master's channels");
    precision::materialize_fp8(master, static_cast<uint16_t*>(out), std::size_t(n), uint64_t(begin), fp8->matrices,
                               fp8->exponent.data(), precision.mode == precision::PrecisionMode::fp8_sr, key,
                               {precision.threads});
    return;
  }
  const bool bf16 = mode == precision::RoundMode::bf16_rn || mode == precision::RoundMode::bf16_sr;
  if (precision.analog_mantissa_bits > 0 && bf16) {
    precision::materialize_coarse_bf16(master, static_cast<uint16_t*>(out), std::size_t(n),
                                       precision.analog_mantissa_bits, mode == precision::RoundMode::bf16_sr, key,
                                       uint64_t(begin), {precision.threads});
    return;
  }
  precision::materialize(master, out, std::size_t(n), mode, key, uint64_t(begin), {precision.threads});
}

void TrainableWeights::materialize_slice(const float* master, int64_t begin, int64_t n, void* out, int64_t step,
                                         const Fp8Channels* fp8) const {
  materialize_compute_slice(precision_, rounding_seed_, master, begin, n, out, step, fp8 ? fp8 : fp8_.get());
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
  for (auto [name, dst] : {std::pair<const char*, torch::Tensor*>{"master", &master_}, {"exp_avg", &exp_avg_},
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
  if (fp8())
    *fp8_ = fp8_channels(layout(), [&](int64_t b, int64_t n, float* out) { read("master", b, n, out); },
                         precision_.threads);
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

void TrainableWeights::take_grad(std::size_t i) {
  torch::NoGradGuard no_grad;
  const torch::Tensor& p = trainable_params()[i];
  const torch::Tensor g = p.grad();
  if (!g.defined()) return;
  const model::ParamEntry& e = layout().entries[i];
  const torch::Tensor flat = g.reshape({-1});
  for (int64_t k = 0; k < e.numel; k += kGradSliceElems) {
    const int64_t n = std::min(kGradSliceElems, e.numel - k);
    grad_.narrow(0, e.offset + k, n).add_(flat.narrow(0, k, n));
  }
  p.mutable_grad().reset();
}

void TrainableWeights::accumulate_grads() {
  for (std::size_t i = 0; i < trainable_params().size(); ++i) take_grad(i);
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
  const c10::DeviceGuard on_master(device_);
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
    const c10::DeviceGuard on_master(device_);
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

void TrainableWeights::slice_segments(int64_t begin, int64_t n, std::vector<precision::Segment>& segments,
                                      std::vector<std::size_t>& tensor) const {
  for (std::size_t i = 0; i < layout().entries.size(); ++i) {
    const model::ParamEntry& e = layout().entries[i];
    const int64_t b = std::max(e.offset, begin), end = std::min(e.offset + e.numel, begin + n);
    if (b >= end) continue;
    segments.push_back({uint64_t(b), uint64_t(end - b), e.decay});
    tensor.push_back(i);
  }
}

void TrainableWeights::count_slice_changes(int64_t begin, int64_t n, const std::vector<precision::Segment>& segments,
                                           const std::vector<std::size_t>& tensor, const torch::Tensor& before,
                                           const torch::Tensor& after, std::vector<int64_t>& changed, double* delta,
                                           double* weight) const {
  if (on_device()) return count_device_slice_changes(begin, n, segments, tensor, before, after, changed, delta, weight);
  const std::size_t bytes = compute_all_.element_size();
  const char* old_bits = static_cast<const char*>(before.data_ptr());
  const char* new_bits = static_cast<const char*>(after.data_ptr());
  for (std::size_t k = 0; k < segments.size(); ++k) {
    const std::size_t at = std::size_t(int64_t(segments[k].offset) - begin) * bytes;
    changed[tensor[k]] += int64_t(precision::count_changed_bits(old_bits + at, new_bits + at, segments[k].size,
                                                                round_mode_));
  }
  precision::add_block_update_sums(old_bits, new_bits, std::size_t(n), round_mode_, std::size_t(kNormBlock), delta,
                                   weight, {precision_.threads});
}

torch::Tensor TrainableWeights::fp8_channel_amax(const float* master, int64_t n, int64_t offset) const {
  const torch::Tensor amax =
      torch::zeros({int64_t(precision::fp8_channel_count(fp8_->matrices))}, master_.options().dtype(torch::kFloat32));
  if (on_device()) {
#if defined(UNSTUCK_HAVE_CUDA)
    const c10::DeviceGuard on_master(device_);
    precision::fp8_channel_amax_cuda(master, std::size_t(n), uint64_t(offset), fp8_->matrices, amax.data_ptr<float>(),
                                     nullptr);
#endif
  } else {
    precision::fp8_channel_amax(master, std::size_t(n), uint64_t(offset), fp8_->matrices, amax.data_ptr<float>(),
                                {precision_.threads});
  }
  return amax;
}

void TrainableWeights::update_fp8_exponents() {
  torch::Tensor amax = fp8_channel_amax(master_.data_ptr<float>(), owned_, shard_begin_);
  const int64_t world = world_of(comm_), channels = amax.numel();
  if (world > 1 && channels > 0) {  // a row split between shards: the max of the parts (exact)
    const torch::Tensor all = torch::empty({world, channels}, amax.options());
    comm_->all_gather(amax.data_ptr<float>(), all.data_ptr<float>(), std::size_t(channels), dist::DataType::f32);
    amax = all.amax(0);
  }
  set_fp8_exponents(amax, fp8_->exponent);
}

torch::Tensor TrainableWeights::fp8_exponents() const {
  std::vector<int32_t>& exponent = fp8_->exponent;
  const torch::Tensor host = torch::from_blob(exponent.data(), {int64_t(exponent.size())}, torch::kInt);
  // On a device: one synchronous copy of a few hundred KB (a real shape's channels) per call.
  return on_device() ? host.to(master_.device()) : host;
}

void TrainableWeights::materialize_fp8_slice(const float* master, int64_t begin, int64_t n, void* out,
                                             const torch::Tensor& exponent) const {
  const precision::SrKey key{rounding_seed_, uint64_t(adam_step_)};
  const bool sr = precision_.mode == precision::PrecisionMode::fp8_sr;
  if (!on_device())
    return precision::materialize_fp8(master, static_cast<uint16_t*>(out), std::size_t(n), uint64_t(begin),
                                      fp8_->matrices, exponent.data_ptr<int32_t>(), sr, key, {precision_.threads});
#if defined(UNSTUCK_HAVE_CUDA)
  const c10::DeviceGuard on_master(device_);
  precision::materialize_fp8_cuda(master, static_cast<uint16_t*>(out), std::size_t(n), uint64_t(begin),
                                  fp8_->matrices, exponent.data_ptr<int32_t>(), sr, key, nullptr);
#endif
}

void TrainableWeights::fp8_update(const precision::AdamWHyper& hyper, precision::SrKey key,
                                  std::vector<int64_t>& changed, std::vector<double>& delta,
                                  std::vector<double>& weight) {
  const int64_t end = shard_begin_ + owned_;
  for (int64_t begin = shard_begin_; begin < end; begin += kSliceElems) {
    const int64_t n = std::min(kSliceElems, end - begin), at = begin - shard_begin_;
    std::vector<precision::Segment> segments;
    std::vector<std::size_t> tensor;
    slice_segments(begin, n, segments, tensor);
    const precision::AdamWBuffers slice{master_.data_ptr<float>() + at, grad_shard_.data_ptr<float>() + at,
                                        exp_avg_.data_ptr<float>() + at, exp_avg_sq_.data_ptr<float>() + at,
                                        fp8_discard_.data_ptr(), uint64_t(begin)};
    fused_adamw(slice, segments, hyper, precision::RoundMode::bf16_rn, key);
  }
  update_fp8_exponents();
  const torch::Tensor exponent = fp8_exponents();  // once per step, for every slice
  for (int64_t begin = shard_begin_; begin < end; begin += kSliceElems) {
    const int64_t n = std::min(kSliceElems, end - begin), at = begin - shard_begin_;
    std::vector<precision::Segment> segments;
    std::vector<std::size_t> tensor;
    slice_segments(begin, n, segments, tensor);
    const torch::Tensor before = scratch_.narrow(0, 0, n), after = compute_all_.narrow(0, begin, n);
    before.copy_(after);
    materialize_fp8_slice(master_.data_ptr<float>() + at, begin, n, after.data_ptr(), exponent);
    const std::size_t block0 = std::size_t(at / kNormBlock);
    count_slice_changes(begin, n, segments, tensor, before, after, changed, delta.data() + block0,
                        weight.data() + block0);
  }
}

void TrainableWeights::fused_adamw(const precision::AdamWBuffers& buffers, const std::vector<precision::Segment>& segments,
                                   const precision::AdamWHyper& hyper, precision::RoundMode mode,
                                   precision::SrKey key) const {
  if (!master_.is_cuda()) {  // the CPU, or host buffers of an offloaded state
    precision::fused_adamw_step(buffers, segments, hyper, mode, key, {precision_.threads});
    return;
  }
#if defined(UNSTUCK_HAVE_CUDA)
  const c10::DeviceGuard on_master(device_);
  precision::fused_adamw_cuda(buffers, segments, hyper, mode, key, nullptr);
#endif
}

void TrainableWeights::update_slice(int64_t begin, int64_t n, const precision::AdamWBuffers& buffers,
                                    const precision::AdamWHyper& hyper, precision::SrKey key,
                                    std::vector<int64_t>& changed, double* delta, double* weight) {
  std::vector<precision::Segment> segments;
  std::vector<std::size_t> tensor;
  slice_segments(begin, n, segments, tensor);
  const torch::Tensor before = scratch_.narrow(0, 0, n), after = compute_all_.narrow(0, begin, n);
  before.copy_(after);
  if (offload_) {
    // The slice's gradient to the host, the update on the host buffers (pointers addressing global
    // element `begin`), its compute weights back to the device; the counts on the device as without.
    const int64_t at = begin - shard_begin_;
    stage_grad_.narrow(0, 0, n).copy_(grad_shard_.narrow(0, at, n));
    const precision::AdamWBuffers host{master_.data_ptr<float>() + at, stage_grad_.data_ptr<float>(),
                                       exp_avg_.data_ptr<float>() + at, exp_avg_sq_.data_ptr<float>() + at,
                                       stage_compute_.data_ptr(), uint64_t(begin)};
    fused_adamw(host, segments, hyper, round_mode_, key);
    after.copy_(stage_compute_.narrow(0, 0, n));
    count_slice_changes(begin, n, segments, tensor, before, after, changed, delta, weight);
    return;
  }
  fused_adamw(buffers, segments, hyper, round_mode_, key);
  // The analog grid: the fused step wrote BF16; the slice is rounded onto the coarser grid.
  if (analog_grid()) materialize_analog(master_.data_ptr<float>() + (begin - shard_begin_), begin, n);
  count_slice_changes(begin, n, segments, tensor, before, after, changed, delta, weight);
}

void TrainableWeights::count_device_slice_changes(int64_t begin, int64_t n,
                                                  const std::vector<precision::Segment>& segments,
                                                  const std::vector<std::size_t>& tensor, const torch::Tensor& before,
                                                  const torch::Tensor& after, std::vector<int64_t>& changed,
                                                  double* delta, double* weight) const {
  // The CPU path's comparisons as tensor operations, one copy of the results to the host.
  const torch::ScalarType bits = compute_all_.element_size() == 4 ? torch::kInt : torch::kShort;
  const torch::Tensor differ = before.view(bits).ne(after.view(bits));  // (n) bool
  std::vector<torch::Tensor> counts;
  for (const precision::Segment& seg : segments)
    counts.push_back(differ.narrow(0, int64_t(seg.offset) - begin, int64_t(seg.size)).sum());
  const int64_t nb = (n + kNormBlock - 1) / kNormBlock;
  const auto sumsq_per_block = [&](const torch::Tensor& x) {  // (n) -> (nb): squares summed in double
    const torch::Tensor x2 = x.to(torch::kDouble).square();
    return torch::constant_pad_nd(x2, {0, nb * kNormBlock - n}).view({nb, kNormBlock}).sum(1);
  };
  const torch::Tensor old_f = before.to(torch::kFloat32);
  const torch::Tensor sums = torch::cat({torch::stack(counts).to(torch::kDouble),
                                         sumsq_per_block(after.to(torch::kFloat32) - old_f), sumsq_per_block(old_f)})
                                 .cpu();
  const double* h = sums.data_ptr<double>();
  for (std::size_t k = 0; k < segments.size(); ++k) changed[tensor[k]] += int64_t(h[k]);
  for (int64_t b = 0; b < nb; ++b) {
    delta[b] += h[segments.size() + std::size_t(b)];
    weight[b] += h[segments.size() + std::size_t(nb + b)];
  }
}

double TrainableWeights::global_block_sum(const std::vector<double>& partial) const {
  std::vector<double> all(partial.size() * std::size_t(world_of(comm_)));
  if (comm_ && comm_->world_size() > 1)
    comm_->all_gather(partial.data(), all.data(), partial.size(), dist::DataType::f64);
  else
    all = partial;
  double sum = 0;
  for (double x : all) sum += x;
  return sum;
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
  const precision::SrKey key{rounding_seed_, uint64_t(adam_step_)};
  std::vector<int64_t> changed(layout().entries.size(), 0);
  const std::size_t blocks = std::size_t(shard_size_ / kNormBlock);
  std::vector<double> delta(blocks, 0.0), weight(blocks, 0.0);  // per block of this rank's shard
  if (fp8()) {
    fp8_update(hyper, key, changed, delta, weight);
  } else {
    for (int64_t begin = shard_begin_; begin < shard_begin_ + owned_; begin += kSliceElems) {
      const int64_t n = std::min(kSliceElems, shard_begin_ + owned_ - begin);
      const std::size_t block0 = std::size_t((begin - shard_begin_) / kNormBlock);
      update_slice(begin, n, buffers, hyper, key, changed, delta.data() + block0, weight.data() + block0);
    }
  }
  stats.update_sumsq = global_block_sum(delta);
  stats.weight_sumsq = global_block_sum(weight);

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
