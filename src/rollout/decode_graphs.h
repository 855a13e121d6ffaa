// CUDA graphs for the rollout's fixed-shape decode steps: a step is captured the first time its key
// (its shape) comes up and replayed after, one launch per token instead of one per op. Builds
// without CUDA kernels compile a stand-in that refuses (decode_graphs_compiled() is false).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace unstuck::rollout {

// Whether this build can capture CUDA graphs (it was built with UNSTUCK_CUDA).
bool decode_graphs_compiled();

// The graphs of one generate() call, in one memory pool (they never run at the same time).
class DecodeGraphs {
 public:
  explicit DecodeGraphs(int device_index);  // the CUDA device the steps run on
  ~DecodeGraphs();
  // Runs `step` for shape `key` on that device: the first time eagerly on a side stream
  // (the step's real work for this token, which also warms libtorch's lazy state for that stream),
  // then captured there as a graph and the eager outputs returned; later calls replay the graph and
  // return the tensors it writes. `step` must read its inputs from, and return, tensors whose
  // addresses stay the same from call to call, and must not synchronize with the host. A capture
  // that fails (an op this device or driver cannot capture) is dropped with a warning and every later
  // call runs `step` eagerly: the same kernels, so the same bits.
  std::vector<torch::Tensor> run(int64_t key, const std::function<std::vector<torch::Tensor>()>& step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace unstuck::rollout
