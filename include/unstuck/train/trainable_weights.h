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

namespace unstuck::train {

// precision.mode fp8_rn / fp8_sr: the FP8 channels of a model, every row (output channel) of the
// linear layers' matrices (the attention and MLP projections; not the embedding or the head), and
// their scale exponents for one master (precision/fp8.h's rule).
struct Fp8Channels {
  std::vector<precision::Fp8Matrix> matrices;
  std::vector<int32_t> exponent;  // per channel: fp8_scale_exponent of its largest finite |x|
};
// The channels of a whole master read a slice at a time: read(begin, n, out) writes FP32 elements
// [begin, begin + n) of it into out[0, n).
Fp8Channels fp8_channels(const model::ParamLayout& layout, const std::function<void(int64_t, int64_t, float*)>& read,
                         int threads = 0);
// The same for a whole master in host memory (layout.total elements).
Fp8Channels fp8_channels(const model::ParamLayout& layout, const float* master, int threads = 0);

// The setting of `precision` that runs on the CPU only, as errors name it ("precision.analog_mantissa_bits
// (the grid-scaled analog) runs on the CPU only"), or "" when it runs anywhere.
std::string cpu_only_precision(const precision::PrecisionConfig& precision);

struct OptimizerStepStats {
  bool skipped = false;        // FP16 modes: the gradients overflowed and the step was skipped
  double grad_norm = 0.0;      // global L2 norm of the (unscaled) gradient, before clipping
  double loss_scale = 1.0;     // scale used for this step's backward
  uint64_t changed = 0;        // compute-weight elements whose bits this step changed
  uint64_t elements = 0;       // compute-weight elements in the model's tensors
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

// The frozen base a LoRA run computes with: `base` (FP32, moved in) rounded to nearest into the
// compute dtype of precision.mode (onto precision.analog_mantissa_bits' grid first in a BF16 mode;
// left as it is in fp32), then held in `forward` (widened to FP32 when the forward runs in FP32).
torch::Tensor frozen_base_weights(torch::Tensor base, const precision::PrecisionConfig& precision,
                                  torch::ScalarType forward);

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
  TrainableWeights(const model::ModelConfig& config, torch::Tensor master,
                   const precision::PrecisionConfig& precision, uint64_t rounding_seed,
                   dist::Communicator* comm = nullptr, FrozenBase base = {},
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
  // FP8 modes: the channel exponents are those of `fp8` (another master's, e.g. the base), or by
  // default this state's current master's.
  void materialize_slice(const float* master, int64_t begin, int64_t n, void* out, int64_t step,
                         const struct Fp8Channels* fp8 = nullptr) const;

  // Restores a checkpointed state (full buffers; this rank takes its shard) and regenerates the compute weights from the master: with the
  // rounding keyed by (seed, optimizer step) they come out bit-identical to the saved run's.
  void restore(const torch::Tensor& master, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
               int64_t optimizer_steps, const precision::LossScalerState& scaler);
  // The same from buffers read a slice at a time: read(name, begin, n, out) writes elements
  // [begin, begin + n) of "master", "exp_avg" or "exp_avg_sq" into host FP32 out[0, n) (e.g.
  // read_checkpoint_buffer), so a checkpoint resumes without a full copy of its state in memory.
  using BufferReader = std::function<void(const std::string& name, int64_t begin, int64_t n, float* out)>;
  void restore(const BufferReader& read, int64_t optimizer_steps, const precision::LossScalerState& scaler);

 private:
  void refresh_forward_weights();
  // The model's leaves whose gradients this state takes: every parameter, or with LoRA the adapters.
  const std::vector<torch::Tensor>& trainable_params() const {
    return model_->has_adapters() ? model_->adapter_parameters() : model_->parameters();
  }
  // Rounds the full master (layout.total elements, on this state's device) into the compute
  // weights with the key of the current optimizer step.
  void materialize_compute(const torch::Tensor& full_master);
  // precision.analog_mantissa_bits in a BF16 mode: the compute weights sit on the coarser analog grid.
  bool analog_grid() const;
  bool fp8() const { return precision::is_fp8(precision_.mode); }
  // FP8 modes: the channel maxima of master[0, n) (global index `offset` first; a pointer on this
  // state's device), a float tensor there, one per channel.
  torch::Tensor fp8_channel_amax(const float* master, int64_t n, int64_t offset) const;
  // FP8 modes: the channel exponents of this state's master (every rank's part of each row).
  void update_fp8_exponents();
  // FP8 modes: fp8_'s channel exponents as an int32 tensor on this state's device (a view of them in
  // host memory on the CPU, a copy on a GPU).
  torch::Tensor fp8_exponents() const;
  // FP8 modes: rounds master[0, n) (global index `begin` first) into out by the FP8 rule at this
  // optimizer step, on this state's device, with `exponent` (fp8_exponents()).
  void materialize_fp8_slice(const float* master, int64_t begin, int64_t n, void* out,
                             const torch::Tensor& exponent) const;
  // FP8 modes, an optimizer step after the reduce: the fused AdamW updates master and moments a
  // slice at a time (its BF16 output discarded), the channel exponents of the new master are
  // taken, then each slice is rounded by the FP8 rule and its changes counted as update_slice does.
  void fp8_update(const precision::AdamWHyper& hyper, precision::SrKey key, std::vector<int64_t>& changed,
                  std::vector<double>& delta, std::vector<double>& weight);
  // The tensors of the shard overlapping [begin, begin + n), clipped to it, and their layout index.
  void slice_segments(int64_t begin, int64_t n, std::vector<precision::Segment>& segments,
                      std::vector<std::size_t>& tensor) const;
  // Changed elements per tensor and the per-block update sums of a slice whose compute weights went
  // from `before` to `after` (on this state's device; one copy of the results to the host).
  void count_slice_changes(int64_t begin, int64_t n, const std::vector<precision::Segment>& segments,
                           const std::vector<std::size_t>& tensor, const torch::Tensor& before,
                           const torch::Tensor& after, std::vector<int64_t>& changed, double* delta,
                           double* weight) const;
  // The device half of count_slice_changes: the same comparisons as tensor operations.
  void count_device_slice_changes(int64_t begin, int64_t n, const std::vector<precision::Segment>& segments,
                                  const std::vector<std::size_t>& tensor, const torch::Tensor& before,
                                  const torch::Tensor& after, std::vector<int64_t>& changed, double* delta,
                                  double* weight) const;
  // Rounds the master's [begin, begin + n) (global indices; master_data points at begin) onto the
  // analog grid at this optimizer step.
  void materialize_analog(const float* master_data, int64_t begin, int64_t n);
  double device_grad_sumsq(int64_t blocks) const;
  // The fused AdamW over `buffers` on this state's device (the CPU kernel or the CUDA one), writing
  // compute weights rounded by `mode`.
  void fused_adamw(const precision::AdamWBuffers& buffers, const std::vector<precision::Segment>& segments,
                   const precision::AdamWHyper& hyper, precision::RoundMode mode, precision::SrKey key) const;
  // One slice [begin, begin + n) of this rank's shard through the fused AdamW: saves its compute
  // weights, updates it, then counts the changed bits per tensor and adds the per-block update sums
  // (blocks of kNormBlock from `begin`, which is block-aligned).
  void update_slice(int64_t begin, int64_t n, const precision::AdamWBuffers& buffers, const precision::AdamWHyper& hyper,
                    precision::SrKey key, std::vector<int64_t>& changed, double* delta, double* weight);
  // Sums of the per-block partials of every rank, in global block order (world-size invariant).
  double global_block_sum(const std::vector<double>& partial) const;
  // Global L2 norm of the reduced gradient, summed in a fixed order whatever the world size.
  double reduced_grad_norm() const;
  bool any_nonfinite_grad() const;
  void throw_nonfinite_grad() const;
  // fp32 mode: the master is this rank's part of the compute weights (one buffer).
  bool master_is_compute() const {
    return master_.data_ptr() == static_cast<char*>(compute_all_.data_ptr()) + shard_begin_ * compute_all_.element_size();
  }

  precision::PrecisionConfig precision_;
  precision::RoundMode round_mode_;
  uint64_t rounding_seed_;
  dist::Communicator* comm_;
  int64_t total_ = 0;        // elements of the model
  int64_t shard_size_ = 0;   // elements per rank in the collectives (a multiple of the norm block)
  int64_t shard_begin_ = 0;  // global index of this rank's first element
  int64_t owned_ = 0;        // model elements in this rank's shard (less than shard_size_ at the end)
  torch::Tensor grad_;         // (W * shard_size) accumulated gradient of the whole model
  torch::Tensor grad_shard_;   // (shard_size) the reduced gradient of this rank's shard
  torch::Tensor master_, exp_avg_, exp_avg_sq_;  // (owned) this rank's shard
  torch::Tensor compute_all_;  // (W * shard_size) compute weights, padded; compute_ views the model's part
  torch::Tensor compute_, forward_;
  torch::Tensor scratch_;      // (kSliceElems) the old compute weights of the slice being updated
  torch::Device device_ = torch::kCPU;  // the model's, gradient's and compute weights' device
  bool offload_ = false;                // precision.offload: optimizer (master and moments on the host)
  torch::Tensor stage_grad_, stage_compute_;  // offload: (kSliceElems) host staging of one slice
  std::unique_ptr<struct Fp8Channels> fp8_;  // FP8 modes: the channels and their current exponents
  torch::Tensor fp8_discard_;  // FP8 modes: (kSliceElems) where the fused AdamW's BF16 output goes
  model::ParamLayout layout_;  // of the trainable tensors
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<precision::LossScaler> scaler_;
  int64_t adam_step_ = 0;
};

// Dtype of the compute weights of a round mode (fp32, bf16 or fp16).
torch::ScalarType compute_dtype(precision::RoundMode mode);

// The compute-weight bits of master[0, n) (FP32, global elements [begin, begin + n)) at optimizer
// step `step`, as TrainableWeights materializes them (precision.mode, the rounding seed, the analog
// grid), into host memory `out` of compute_dtype (n elements). A checkpoint's compute weights are
// regenerated with it a slice at a time (export, resume).
// FP8 modes need the channels' exponents of the master being rounded (fp8_channels); else fp8 is unused.
void materialize_compute_slice(const precision::PrecisionConfig& precision, uint64_t rounding_seed,
                               const float* master, int64_t begin, int64_t n, void* out, int64_t step,
                               const Fp8Channels* fp8 = nullptr);

// grpo.round_base_to_fp8: the FP32 base put on fp8_rn's grid in place (FP8 channels by their own
// scales, computed from this master; every other element to nearest BF16), as FP32 values; CPU.
void round_base_to_fp8_(torch::Tensor& master, const model::ParamLayout& layout, int threads = 0);
// The same for global elements [begin, begin + n) of a base, in place, with the unrounded base's
// channels (fp8_channels of it).
void round_base_to_fp8(float* x, int64_t begin, int64_t n, const Fp8Channels& channels, int threads = 0);

// grpo.round_base_to_bf16: the FP32 base rounded to nearest BF16, or onto the grid of
// precision.analog_mantissa_bits when that is set (1-6), as FP32 again (on master's device).
torch::Tensor round_base_to_grid(const torch::Tensor& master, int analog_mantissa_bits);
// The same in place, a bounded slice at a time (no full-size temporary). `master`: contiguous FP32.
void round_base_to_grid_(torch::Tensor& master, int analog_mantissa_bits);
// round_base_to_grid_ of host FP32 values x[0, n).
void round_base_to_grid(float* x, int64_t n, int analog_mantissa_bits);

}  // namespace unstuck::train
