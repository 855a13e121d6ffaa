// The flat gradient of TrainableWeights: each parameter's gradient moved into it, its global norm
// summed in a fixed order whatever the world size, and the non-finite check that names the tensor.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cmath>

#include "train/flat_buffers.h"
#include "unstuck/common/error.h"
#include "unstuck/precision/rounding.h"
#include "unstuck/train/trainable_weights.h"
#if defined(UNSTUCK_HAVE_CUDA)
#include "unstuck/precision/cuda_kernels.h"
#endif

namespace unstuck::train {

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
  if (comm_)
    comm_->all_gather(partial.data(), all.data(), partial.size(), dist::DataType::f64);
  else
    all = partial;
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

}  // namespace unstuck::train
