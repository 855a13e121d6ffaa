// DecodeGraphs on libtorch's CUDA graphs (at::cuda::CUDAGraph), capture on a side stream as
// torch.cuda.graph does; a stand-in that refuses when the build has no CUDA kernels.
#include "rollout/decode_graphs.h"

#include <map>
#include <stdexcept>
#include <utility>

#if defined(UNSTUCK_HAVE_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>
#endif

namespace unstuck::rollout {

#if defined(UNSTUCK_HAVE_CUDA)

bool decode_graphs_compiled() { return true; }

struct DecodeGraphs::Impl {
  explicit Impl(int device_index) : device(device_index), side(c10::cuda::getStreamFromPool(false, device_index)) {}
  c10::DeviceIndex device;
  c10::cuda::CUDAStream side;
  at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();  // shared: the graphs run one at a time
  std::map<int64_t, std::pair<std::unique_ptr<at::cuda::CUDAGraph>, std::vector<torch::Tensor>>> graphs;
  bool failed = false;  // a capture failed: every step runs eagerly
};

DecodeGraphs::DecodeGraphs(int device_index) : impl_(std::make_unique<Impl>(device_index)) {}
DecodeGraphs::~DecodeGraphs() = default;

std::vector<torch::Tensor> DecodeGraphs::run(int64_t key, const std::function<std::vector<torch::Tensor>()>& step) {
  const c10::cuda::CUDAGuard on_device(impl_->device);
  if (impl_->failed) return step();
  const auto it = impl_->graphs.find(key);
  if (it != impl_->graphs.end()) {
    it->second.first->replay();
    return it->second.second;
  }
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(current);
  inputs_ready.block(impl_->side);  // the side stream sees the inputs the current one wrote
  std::vector<torch::Tensor> eager;
  {
    c10::cuda::CUDAStreamGuard on_side(impl_->side);
    eager = step();
    if (!impl_->failed) {
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      try {
        graph->capture_begin(impl_->pool);
        std::vector<torch::Tensor> outputs = step();  // recorded, not run
        graph->capture_end();
        impl_->graphs.emplace(key, std::make_pair(std::move(graph), std::move(outputs)));
      } catch (const std::exception& e) {
        // A step this device or driver cannot capture: the capture is ended and dropped, and every
        // later step of the call runs eagerly (the same kernels, so the same bits).
        try {
          graph->capture_end();
        } catch (const std::exception&) {
        }
        (void)cudaGetLastError();
        impl_->failed = true;
        spdlog::warn("rollout: CUDA graph capture failed, decoding op by op for the rest of this call: {}",
                     std::string(e.what()).substr(0, 300));
      }
    }
  }
  at::cuda::CUDAEvent done;
  done.record(impl_->side);
  done.block(current);  // the current stream sees the eager step's results
  for (torch::Tensor& t : eager) t.record_stream(current);
  return eager;
}

#else

bool decode_graphs_compiled() { return false; }

struct DecodeGraphs::Impl {};
DecodeGraphs::DecodeGraphs(int) {
  throw std::logic_error("DecodeGraphs: this build has no CUDA kernels (decode_graphs_compiled() is false)");
}
DecodeGraphs::~DecodeGraphs() = default;
std::vector<torch::Tensor> DecodeGraphs::run(int64_t, const std::function<std::vector<torch::Tensor>()>&) {
  throw std::logic_error("DecodeGraphs: this build has no CUDA kernels");
}

#endif

}  // namespace unstuck::rollout
