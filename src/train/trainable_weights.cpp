// Flat trainable state: gradient collection, loss-scaler handling, clipping and the fused AdamW step
// that rounds the master into the compute weights.
#include "unstuck/train/trainable_weights.h"

#include <ATen/ATen.h>

#include <cmath>

#include "unstuck/common/error.h"

namespace unstuck::train {

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

TrainableWeights::TrainableWeights(const model::ModelConfig& config, torch::Tensor master,
                                   const precision::PrecisionConfig& precision,
                                   uint64_t rounding_seed)
    : precision_(precision),
      round_mode_(precision::round_mode_for(precision.mode)),
      rounding_seed_(rounding_seed),
      master_(std::move(master)) {
  const model::ParamLayout layout = model::llama_layout(config);
  if (master_.scalar_type() != torch::kFloat32 || master_.numel() != layout.total)
    throw UserError("trainable weights: expected an FP32 master of " + std::to_string(layout.total) +
                    " elements");
  master_ = master_.contiguous();
  grad_ = torch::zeros_like(master_);
  exp_avg_ = torch::zeros_like(master_);
  exp_avg_sq_ = torch::zeros_like(master_);
  compute_ = torch::empty({layout.total}, compute_dtype(round_mode_));
  precision::materialize(master_.data_ptr<float>(), compute_.data_ptr(), std::size_t(layout.total),
                         round_mode_, {rounding_seed_, 0}, 0, {precision_.threads});
  // FP16 has no fast CPU kernels: compute in FP32 on the FP16-rounded weights (DESIGN.md).
  const bool fp32_forward = precision_.compute == precision::ComputeMode::fp32 ||
                            compute_.scalar_type() == torch::kHalf;
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
    if (t->numel() != master_.numel())
      throw UserError("checkpoint state has " + std::to_string(t->numel()) + " elements, the model " +
                      std::to_string(master_.numel()) + " (a different model?)");
  torch::NoGradGuard no_grad;
  master_.copy_(master);
  exp_avg_.copy_(exp_avg);
  exp_avg_sq_.copy_(exp_avg_sq);
  grad_.zero_();
  adam_step_ = optimizer_steps;
  scaler_->load_state(scaler);
  precision::materialize(master_.data_ptr<float>(), compute_.data_ptr(), std::size_t(master_.numel()),
                         round_mode_, {rounding_seed_, uint64_t(adam_step_)}, 0, {precision_.threads});
  refresh_forward_weights();
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

OptimizerStepStats TrainableWeights::optimizer_step(const precision::OptimConfig& optim, double lr) {
  OptimizerStepStats stats;
  stats.loss_scale = scaler_->scale();
  const precision::KernelOptions kopt{precision_.threads};
  const bool overflow = precision::found_nonfinite(grad_.data_ptr<float>(), std::size_t(grad_.numel()), kopt);
  if (overflow && !precision::uses_loss_scaling(precision_.mode)) {
    for (const model::ParamEntry& e : layout().entries)
      if (!torch::isfinite(grad_.narrow(0, e.offset, e.numel)).all().item<bool>())
        throw UserError("non-finite gradient in tensor '" + e.name + "' at optimizer step " +
                        std::to_string(adam_step_ + 1) +
                        " (precision.mode " + precision::round_mode_name(round_mode_) +
                        " has no loss scaling; lower optim.lr or use a loss-scaled mode)");
  }
  if (overflow) {
    scaler_->update(true);
    grad_.zero_();
    stats.skipped = true;
    return stats;
  }
  const double inv_scale = 1.0 / stats.loss_scale;
  stats.grad_norm = grad_.norm().item<double>() * inv_scale;
  double clip = 1.0;
  if (optim.grad_clip > 0 && stats.grad_norm > optim.grad_clip) clip = optim.grad_clip / stats.grad_norm;

  ++adam_step_;
  precision::AdamWHyper hyper;
  hyper.lr = lr;
  hyper.beta1 = optim.beta1;
  hyper.beta2 = optim.beta2;
  hyper.eps = optim.eps;
  hyper.weight_decay = optim.weight_decay;
  hyper.step = adam_step_;
  hyper.grad_scale = inv_scale * clip;
  const precision::AdamWBuffers buffers{master_.data_ptr<float>(), grad_.data_ptr<float>(),
                                        exp_avg_.data_ptr<float>(), exp_avg_sq_.data_ptr<float>(),
                                        compute_.data_ptr(), 0};
  const precision::AdamWStepStats s = precision::fused_adamw_step(
      buffers, layout().segments(), hyper, round_mode_, {rounding_seed_, uint64_t(adam_step_)}, kopt);
  stats.changed = s.changed_total;
  stats.elements = s.elements;
  stats.changed_per_tensor = s.changed;
  grad_.zero_();
  refresh_forward_weights();
  scaler_->update(false);
  return stats;
}

}  // namespace unstuck::train
