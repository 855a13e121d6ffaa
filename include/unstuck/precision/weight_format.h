// A number format of the compute weights, as one object: how the FP32 master is rounded into them
// (materialize), the fused AdamW step that writes them (update), and any state the rounding needs
// (FP8's per-channel scales). The CPU or CUDA kernels are chosen once, when the format is made for
// the memory its buffers live in.
//
// The formats: fp32 (the master itself), fp16 / bf16 rounded to nearest or stochastically, the
// grid-scaled analog (precision.analog_mantissa_bits in a BF16 mode: BF16 patterns on a coarser
// grid) and FP8 E4M3 with per-channel scales (fp8_rn / fp8_sr, held as BF16 patterns). A new format
// is one subclass in src/precision/weight_format.cpp, a PrecisionMode value for it and a case in
// WeightFormat::make (docs/BUILD.md, "Where things go").
//
// Torch-free header; the implementation is built with libtorch (its device buffers and counts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "unstuck/precision/fused_adamw.h"
#include "unstuck/precision/precision_config.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision {

// precision.mode fp8_rn / fp8_sr: the FP8 channels of a model (every row of the linear layers'
// matrices: the attention and MLP projections, not the embedding or the head) and their scale
// exponents for one master (fp8.h's rule).
struct Fp8Channels {
  std::vector<Fp8Matrix> matrices;
  std::vector<int32_t> exponent;  // per channel: fp8_scale_exponent of its largest finite |x|
};
// exponent[i] = fp8_scale_exponent(amax[i]) for the n channel maxima amax (host memory).
void set_fp8_exponents(const float* amax, std::size_t n, std::vector<int32_t>& exponent);
// The channels of a master of `total` elements read a slice at a time: read(begin, n, out) writes
// its FP32 elements [begin, begin + n) into out[0, n).
Fp8Channels fp8_channels(std::vector<Fp8Matrix> matrices, int64_t total,
                         const std::function<void(int64_t, int64_t, float*)>& read, int threads = 0);

// The same for a whole master of n elements in host memory.
Fp8Channels fp8_channels(std::vector<Fp8Matrix> matrices, const float* master, std::size_t n, int threads = 0);
// x[0, n) (FP32 in host memory, global elements [begin, begin + n)) put on fp8_rn's grid in place
// with `channels`' scales (every element outside the channels to nearest BF16), as FP32 values.
void round_to_fp8_grid(float* x, uint64_t begin, std::size_t n, const Fp8Channels& channels, int threads = 0);

// The memory a format's buffers live in: the host, or CUDA device `device`.
struct Place {
  bool cuda = false;
  int device = 0;
};

// Where in one slice of the compute weights a step's changes are counted: `n` elements from global
// index `begin`, the tensors it meets (`segments`, global offsets) and their indices (`tensor`).
struct SliceTensors {
  uint64_t begin = 0;
  std::size_t n = 0;
  std::vector<Segment> segments;
  std::vector<std::size_t> tensor;
};

class WeightFormat {
 public:
  // The format of `precision` (its mode and analog grid) for buffers in `place`. `rounding_seed`
  // keys stochastic rounding (with the optimizer step). FP8 modes: `fp8_matrices` are the model's
  // FP8 channels (ParamLayout::fp8_matrices). Throws UserError for a format `place` cannot run.
  static std::unique_ptr<WeightFormat> make(const PrecisionConfig& precision, uint64_t rounding_seed, Place place,
                                            std::vector<Fp8Matrix> fp8_matrices = {});
  virtual ~WeightFormat();

  // How a compute-weight element is stored: fp32, bf16 (also the analog grid's and FP8's values,
  // held as BF16 patterns) or fp16 (the round mode's element type and bit-change rule).
  RoundMode storage() const { return storage_; }
  Place place() const { return place_; }

  // master[0, n) (global elements [begin, begin + n)) rounded into compute[0, n) with the key of
  // optimizer step `step`, in this format's place. Formats with scales (FP8) round with those of
  // `scales` (another master's, e.g. the base's), by default their own (rescale()).
  virtual void materialize(const float* master, uint64_t begin, std::size_t n, void* compute, uint64_t step,
                           const Fp8Channels* scales = nullptr) const;
  // The fused AdamW over one slice of n elements (buffers address global element `slice.base`):
  // master and moments updated and, unless deferred(), the slice's compute weights written.
  virtual void update(const AdamWBuffers& slice, std::size_t n, const std::vector<Segment>& segments,
                      const AdamWHyper& hyper, uint64_t step) const;
  // True when a slice's compute weights depend on master elements outside it (FP8: a row's scale is
  // its largest element). update() then writes its output into scratch the caller gives (discarded),
  // and after every slice of the step is updated the caller calls rescale() on its whole shard and
  // materialize() on each slice.
  virtual bool deferred() const { return false; }
  // Formats with scales: takes them from the n elements of `master` (global index `begin` first; a
  // shard, or the whole master). `combine`, given with several ranks, makes a buffer of per-channel
  // maxima (in this place's memory) the elementwise maximum over the ranks.
  using Combine = std::function<void(float* values, std::size_t n)>;
  virtual void rescale(const float* /*master*/, uint64_t /*begin*/, std::size_t /*n*/, const Combine& /*combine*/) {}
  // The same from a whole master of `total` elements read a slice at a time (a checkpoint's).
  virtual void rescale(const std::function<void(int64_t, int64_t, float*)>& /*read*/, int64_t /*total*/) {}
  // The scales, or nullptr in a format without.
  virtual const Fp8Channels* scales() const { return nullptr; }

 protected:
  WeightFormat(const PrecisionConfig& precision, uint64_t rounding_seed, Place place);
  SrKey key(uint64_t step) const { return {seed_, step}; }
  KernelOptions threads() const { return {threads_}; }
  // The fused AdamW kernel of this place, writing compute weights rounded by `mode`.
  void fused_adamw(const AdamWBuffers& slice, const std::vector<Segment>& segments, const AdamWHyper& hyper,
                   RoundMode mode, uint64_t step) const;

  RoundMode storage_;
  Place place_;
  uint64_t seed_;
  int threads_;
};

// Adds one slice's changes in compute weights stored as `storage`, `before` and `after` (n elements
// each, in `place`): changed[tensor[k]] += the elements of segment k whose bits differ, and per block
// of `block` elements from slice.begin delta[b] += sum of (after - before)^2 and weight[b] += sum of
// before^2 (the values widened to FP32, the squares summed in double in a fixed order).
void count_slice_changes(RoundMode storage, Place place, const SliceTensors& slice, const void* before,
                         const void* after, std::size_t block, std::vector<int64_t>& changed, double* delta,
                         double* weight, const KernelOptions& options = {});

}  // namespace unstuck::precision
