// The trainable state of a policy, as DESIGN.md lays it out: one flat FP32 master, flat AdamW
// moments, a flat FP32 gradient, and the flat compute weights (fp32 / bf16 / fp16, rounded from the
// master once per optimizer step by the fused AdamW). The model's parameters view the compute
// weights, or an FP32 copy of them when the forward pass computes in FP32 (precision.compute: fp32,
// or FP16 weights on a CPU, which has no fast FP16 kernels).
// With a communicator of world size W the optimizer state is sharded (ZeRO-1): each rank owns one
// contiguous range of the flat buffers (master, AdamW moments), reduce-scatters the gradient onto
// it, runs the fused AdamW with rounding there, and all-gathers the rounded compute weights, so
// every rank holds the full compute weights. Stochastic rounding is keyed by the global element
// index, so the result is bit-identical to the unsharded step.
// A master on a CUDA device keeps every buffer on that device and runs the CUDA fused AdamW +
// rounding kernels, a device gradient norm and a device non-finite check; the rounded bits equal
// the CPU's for the same inputs (docs/PRECISION.md). Several ranks on CUDA need the NCCL backend.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "unstuck/dist/communicator.h"
#include "unstuck/model/llama.h"
#include "unstuck/precision/fused_adamw.h"
#include "unstuck/precision/loss_scaler.h"
#include "unstuck/precision/optim_config.h"
#include "unstuck/precision/precision_config.h"
#include "unstuck/precision/weight_format.h"
#include "unstuck/train/weight_rounding.h"

namespace unstuck::train {

struct OptimizerStepStats {
  bool skipped = false;                      // FP16 modes: the gradients overflowed and the step was skipped
  double grad_norm = 0.0;                    // global L2 norm of the (unscaled) gradient, before clipping
  double loss_scale = 1.0;                   // scale used for this step's backward
  uint64_t changed = 0;                      // compute-weight elements whose bits this step changed
  uint64_t elements = 0;                     // compute-weight elements in the model's tensors
  std::vector<uint64_t> changed_per_tensor;  // in layout order
  // Over the whole model (every rank's shard): sum of (after - before)^2 of the compute weights'
  // values, and sum of before^2; sqrt of their ratio is ||delta w|| / ||w|| of this step.
  double update_sumsq = 0.0, weight_sumsq = 0.0;
};

// The full FP32 optimizer state (layout.total elements each), as checkpoints hold it.
struct FullOptimizerState {
  torch::Tensor master, exp_avg, exp_avg_sq;
};

// LoRA (lora.rank > 0): what the trainable adapters sit on. The state then trains the adapters of
// `spec` (lora_layout order) and the model is the frozen base plus them (LlamaModel::set_adapters).
struct FrozenBase {
  model::LoraSpec spec;
  torch::Tensor weights;  // the FP32 base (llama_layout total elements) on the master's device; moved in
  // lora.init pissa: the adapters' FP32 start (pissa_init's; `weights` is then the residual), which
  // the reference adds to the base and the PEFT export converts with. Undefined otherwise.
  torch::Tensor start;
};

class TrainableWeights {
 public:
  // `master` (FP32, layout.total elements, the same on every rank) becomes the master copy; this
  // rank keeps its shard. Passed as the only reference to its buffer (std::move, not a view) at
  // world size 1, the buffer is adopted instead of copied; otherwise this rank's shard is copied.
  // Compute weights are materialized from it (step 0); in fp32 mode they are the master itself (the
  // same buffer: no rounding, no copy). Every buffer lives on `master`'s device (CPU or CUDA). `rounding_seed` keys
  // stochastic rounding. `comm` (optional, outlives this object): the ranks sharing the state;
  // without one the state is not sharded. precision.compute is native or fp32 (auto is resolved
  // before, by train::resolve_compute).
  // With `base` (LoRA) the master is the adapters' (lora_layout(config, base.spec).total elements):
  // they are the trainable state, and the base becomes frozen_base_weights() of it, the model's
  // weights, with no master, moments or gradient of its own; the forward dtype is the adapters'.
  // precision.offload: optimizer: `master` is on the CPU and stays there with the moments; the
  // gradient, the compute weights and the model live on `device` (default: the master's), and each
  // optimizer step moves the gradient to the host and the new compute weights back, a slice at a
  // time through two bounded staging buffers (pinned on a GPU).
  TrainableWeights(const model::ModelConfig& config, torch::Tensor master, const precision::PrecisionConfig& precision,
                   uint64_t rounding_seed, dist::Communicator* comm = nullptr, FrozenBase base = {},
                   std::optional<torch::Device> device = std::nullopt);
  // The parameters' gradient hooks point at this object: it stays where it was built.
  TrainableWeights(const TrainableWeights&) = delete;
  TrainableWeights& operator=(const TrainableWeights&) = delete;
  ~TrainableWeights();

  const model::LlamaModel& model() const { return *model_; }
  // The trainable tensors: the model's (llama_layout), or with LoRA the adapters' (lora_layout).
  const model::ParamLayout& layout() const { return layout_; }
  // LoRA: the model is a frozen base (model().flat_weights()) plus the trainable adapters.
  bool lora() const { return model_->has_adapters(); }
  // This rank's shard of the master and moments: global elements [shard_begin(), shard_begin() +
  // master().numel()). At world size 1, the whole buffers.
  const torch::Tensor& master() const { return master_; }
  const torch::Tensor& exp_avg() const { return exp_avg_; }
  const torch::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  int64_t shard_begin() const { return shard_begin_; }
  // The full master and moments on every rank (a collective: every rank must call it).
  FullOptimizerState gather_state() const;
  const precision::LossScalerState& scaler_state() const { return scaler_->state(); }
  const torch::Tensor& compute() const { return compute_; }
  // True when the model, its gradient and compute weights live on a CUDA device (the master and
  // moments too unless precision.offload is optimizer).
  bool on_device() const;
  // precision.offload: optimizer: the master and moments in host memory.
  bool offloaded() const { return offload_; }
  precision::RoundMode round_mode() const { return round_mode_; }
  const precision::PrecisionConfig& precision() const { return precision_; }
  torch::ScalarType forward_dtype() const { return forward_.scalar_type(); }
  // Multiplier for the loss before backward (1 outside the FP16 modes).
  double loss_scale() const { return scaler_->scale(); }
  int64_t optimizer_steps() const { return adam_step_; }

  // Moves the parameters' gradients into the flat FP32 gradient (adding to what is there) and
  // clears them; call after each backward. Each parameter's gradient is normally moved there by a
  // hook as soon as the backward pass has produced it (so the per-parameter gradients never exist
  // all at once); this catches any left over.
  void accumulate_grads();
  // Adds one parameter's gradient into the flat gradient (bounded slices) and clears it.
  void take_grad(std::size_t param_index);
  // Adds a flat FP32 gradient (layout.total elements) to the accumulated one (custom losses, tests).
  void add_flat_grad(const torch::Tensor& grad);
  // One AdamW step on the accumulated gradient (then zeroed) with global-norm clipping, writing
  // the new master and the rounded compute weights. Throws UserError naming the tensor when a
  // gradient is NaN/Inf outside the FP16 modes (those skip the step instead).
  OptimizerStepStats optimizer_step(const precision::OptimConfig& optim, double lr);

  // The compute-weight bits of master[0, n) (FP32, global elements [begin, begin + n)) at optimizer
  // step `step`, as materialize_compute() writes them, into `out` (host memory of compute().dtype,
  // n elements). Used to regenerate the start weights a slice at a time.
  // Formats with scales (FP8): those of `scales` (another master's, e.g. the base), or by default
  // this state's current master's.
  void materialize_slice(const float* master, int64_t begin, int64_t n, void* out, int64_t step,
                         const Fp8Channels* scales = nullptr) const;
  // A new format of this state's precision on the host, with its own scales (FP8: set them from
  // another master with rescale(), then pass scales() to materialize_slice).
  std::unique_ptr<precision::WeightFormat> host_format() const;

  // Restores a checkpointed state (full buffers; this rank takes its shard) and regenerates the
  // compute weights from the master: with the rounding keyed by (seed, optimizer step) they come
  // out bit-identical to the saved run's.
  void restore(const torch::Tensor& master, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
               int64_t optimizer_steps, const precision::LossScalerState& scaler);
  // The same from buffers read a slice at a time: read(name, begin, n, out) writes elements
  // [begin, begin + n) of "master", "exp_avg" or "exp_avg_sq" into host FP32 out[0, n) (e.g.
  // read_checkpoint_buffer), so a checkpoint resumes without a full copy of its state in memory.
  using BufferReader = std::function<void(const std::string& name, int64_t begin, int64_t n, float* out)>;
  void restore(const BufferReader& read, int64_t optimizer_steps, const precision::LossScalerState& scaler);

 private:
  // What one optimizer step changed in this rank's shard: elements per tensor (layout order), and
  // per block of kNormBlock elements the sums of (after - before)^2 and before^2 of the compute weights.
  struct StepCounts {
    std::vector<int64_t> changed;
    std::vector<double> delta, weight;
  };
  // The constructor's parts: the inputs' checks, this rank's buffers (the compute weights rounded
  // from `master`, which is released at the end), the model viewing them.
  void check_inputs(const model::ModelConfig& config, const torch::Tensor& master, const FrozenBase& base) const;
  void allocate(torch::Tensor master);
  void build_model(const model::ModelConfig& config, FrozenBase base);
  void refresh_forward_weights();
  // The model's leaves whose gradients this state takes: every parameter, or with LoRA the adapters.
  const std::vector<torch::Tensor>& trainable_params() const {
    return model_->has_adapters() ? model_->adapter_parameters() : model_->parameters();
  }
  // Rounds the full master (layout.total elements, on the master's device) into the compute weights
  // with the key of the current optimizer step.
  void materialize_compute(const torch::Tensor& full_master);
  // The tensors of the shard overlapping [begin, begin + n), clipped to it, and their layout index.
  precision::SliceTensors slice_tensors(int64_t begin, int64_t n) const;
  // One slice [begin, begin + n) of this rank's shard through the format's fused AdamW: saves its
  // compute weights, updates it, then counts the changes (a deferred format: the update only).
  void update_slice(int64_t begin, int64_t n, const precision::AdamWHyper& hyper, StepCounts& counts);
  // A deferred format, after every slice is updated: its scales from the whole new master (every
  // rank's part of each), then each slice rounded and its changes counted.
  void round_deferred(StepCounts& counts);
  void count_changes(const precision::SliceTensors& slice, const torch::Tensor& before, const torch::Tensor& after,
                     StepCounts& counts) const;
  double device_grad_sumsq(int64_t blocks) const;
  // Sums of the per-block partials of every rank, in global block order (world-size invariant).
  double global_block_sum(const std::vector<double>& partial) const;
  // Global L2 norm of the reduced gradient, summed in a fixed order whatever the world size.
  double reduced_grad_norm() const;
  bool any_nonfinite_grad() const;
  void throw_nonfinite_grad() const;
  // fp32 mode: the master is this rank's part of the compute weights (one buffer).
  bool master_is_compute() const {
    return master_.data_ptr() ==
           static_cast<char*>(compute_all_.data_ptr()) + shard_begin_ * compute_all_.element_size();
  }

  precision::PrecisionConfig precision_;
  precision::RoundMode round_mode_;
  uint64_t rounding_seed_;
  dist::Communicator* comm_;
  int64_t total_ = 0;         // elements of the model
  int64_t shard_size_ = 0;    // elements per rank in the collectives (a multiple of the norm block)
  int64_t shard_begin_ = 0;   // global index of this rank's first element
  int64_t owned_ = 0;         // model elements in this rank's shard (less than shard_size_ at the end)
  torch::Tensor grad_;        // (W * shard_size) accumulated gradient of the whole model
  torch::Tensor grad_shard_;  // (shard_size) the reduced gradient of this rank's shard
  torch::Tensor master_, exp_avg_, exp_avg_sq_;  // (owned) this rank's shard
  torch::Tensor compute_all_;  // (W * shard_size) compute weights, padded; compute_ views the model's part
  torch::Tensor compute_, forward_;
  torch::Tensor scratch_;                            // (kSliceElems) the old compute weights of the slice being updated
  torch::Device device_ = torch::kCPU;               // the model's, gradient's and compute weights' device
  bool offload_ = false;                             // precision.offload: optimizer (master and moments on the host)
  torch::Tensor stage_grad_, stage_compute_;         // offload: (kSliceElems) host staging of one slice
  std::unique_ptr<precision::WeightFormat> format_;  // in the master's place
  torch::Tensor discard_;      // a deferred format: (kSliceElems) where the fused AdamW's output goes
  model::ParamLayout layout_;  // of the trainable tensors
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<precision::LossScaler> scaler_;
  int64_t adam_step_ = 0;
};

}  // namespace unstuck::train
