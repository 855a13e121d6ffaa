// NCCL backend through NCCL's own API: ncclCommInitRank with the unique id that rank 0 publishes in
// the TCP store, one CUDA stream on the GPU of LOCAL_RANK. Device buffers (a trainer on CUDA) go to
// NCCL as they are, after the communicator's stream waits for the work already queued on the
// default stream; host buffers (a CPU trainer, small flags and counts) are staged through a device
// buffer grown on demand. A collective that does not finish within dist.timeout_s aborts the
// communicator and names the silent ranks.
#include "unstuck/dist/communicator.h"

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"

#if defined(UNSTUCK_HAVE_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dist/rendezvous.h"
#endif

namespace unstuck::dist {

std::string nccl_unavailable_reason() {
  if (!nccl_compiled()) return "this build has no NCCL (configure with UNSTUCK_CUDA=ON on a machine with nvcc)";
  std::string why;
  if (cuda_device_count(&why) == 0) return "no usable CUDA device (" + why + ")";
  return "";
}

#if defined(UNSTUCK_HAVE_NCCL)
namespace {

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::f32:
      return ncclFloat32;
    case DataType::f64:
      return ncclFloat64;
    case DataType::i64:
      return ncclInt64;
    case DataType::u8:
      return ncclUint8;
  }
  return ncclUint8;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const LaunchEnv& env, double timeout_s)
      : Communicator(env.rank, env.world_size), env_(env), timeout_s_(timeout_s) {
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (env.local_rank >= devices)
      throw UserError("LOCAL_RANK " + std::to_string(env.local_rank) + " has no GPU: this machine has " +
                      std::to_string(devices) + " (start at most that many ranks per node)");
    check_cuda(cudaSetDevice(env.local_rank), "cudaSetDevice");
    store_ = connect_store(env, timeout_s);
    ncclUniqueId id;
    const std::string key = "unstuck/nccl_unique_id";
    if (env.rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store_->set(key,
                  std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
    } else {
      const std::vector<uint8_t> bytes = store_->get(key);
      if (bytes.size() != sizeof id) throw std::runtime_error("NCCL unique id of the wrong size in the store");
      std::memcpy(&id, bytes.data(), sizeof id);
    }
    check_nccl(ncclCommInitRank(&comm_, env.world_size, id, env.rank), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclCommunicator() override {
    if (buffer_) cudaFree(buffer_);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
    if (ready_) cudaEventDestroy(ready_);
  }
  const char* backend_name() const override { return "nccl"; }

 protected:
  void do_all_reduce(void* data, std::size_t count, DataType type) override {
    const std::size_t bytes = count * element_size(type);
    if (on_device(data)) {
      run("all_reduce", [&] { return ncclAllReduce(data, data, count, nccl_type(type), ncclSum, comm_, stream_); });
      return;
    }
    char* d = stage_in(data, bytes, bytes);
    run("all_reduce", [&] { return ncclAllReduce(d, d, count, nccl_type(type), ncclSum, comm_, stream_); });
    stage_out(data, d, bytes);
  }
  void do_reduce_scatter(const void* input, void* output, std::size_t count, DataType type) override {
    const std::size_t out_bytes = count * element_size(type), in_bytes = out_bytes * std::size_t(world_size());
    if (on_device(input, output)) {
      run("reduce_scatter",
          [&] { return ncclReduceScatter(input, output, count, nccl_type(type), ncclSum, comm_, stream_); });
      return;
    }
    char* d = stage_in(input, in_bytes, in_bytes + out_bytes);
    char* out = d + in_bytes;
    run("reduce_scatter", [&] { return ncclReduceScatter(d, out, count, nccl_type(type), ncclSum, comm_, stream_); });
    stage_out(output, out, out_bytes);
  }
  void do_all_gather(const void* input, void* output, std::size_t count, DataType type) override {
    const std::size_t in_bytes = count * element_size(type), out_bytes = in_bytes * std::size_t(world_size());
    if (on_device(input, output)) {
      run("all_gather", [&] { return ncclAllGather(input, output, count, nccl_type(type), comm_, stream_); });
      return;
    }
    // In place: this rank's piece already sits at its slot of the output.
    char* d = stage_in(nullptr, 0, out_bytes);
    char* mine = d + in_bytes * std::size_t(rank());
    check_cuda(cudaMemcpyAsync(mine, input, in_bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    run("all_gather", [&] { return ncclAllGather(mine, d, count, nccl_type(type), comm_, stream_); });
    stage_out(output, d, out_bytes);
  }
  void do_broadcast(void* data, std::size_t count, DataType type, int root) override {
    const std::size_t bytes = count * element_size(type);
    if (on_device(data)) {
      run("broadcast", [&] { return ncclBroadcast(data, data, count, nccl_type(type), root, comm_, stream_); });
      return;
    }
    char* d = stage_in(data, bytes, bytes);
    run("broadcast", [&] { return ncclBroadcast(d, d, count, nccl_type(type), root, comm_, stream_); });
    stage_out(data, d, bytes);
  }
  void do_barrier() override {
    float x = 0;
    do_all_reduce(&x, 1, DataType::f32);
  }

 private:
  // Copies `bytes` of host data into a device buffer of at least `capacity` bytes.
  char* stage_in(const void* host, std::size_t bytes, std::size_t capacity) {
    if (capacity > capacity_) {
      if (buffer_) check_cuda(cudaFree(buffer_), "cudaFree");
      check_cuda(cudaMalloc(&buffer_, capacity), "cudaMalloc");
      capacity_ = capacity;
    }
    if (bytes) check_cuda(cudaMemcpyAsync(buffer_, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    return static_cast<char*>(buffer_);
  }
  void stage_out(void* host, const void* device, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    wait("copy back");
  }
  // True when `p` (and `q`, if given) is device memory; a mix of host and device is an error.
  static bool on_device(const void* p, const void* q = nullptr) {
    const auto device = [](const void* x) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, x) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "invalid value" of a plain host pointer
        return false;
      }
      return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    };
    const bool a = device(p);
    if (q && device(q) != a)
      throw std::invalid_argument("NCCL collective: one buffer on the device, the other on the host");
    return a;
  }
  template <class F>
  void run(const char* what, F&& launch) {
    // Work queued on the legacy default stream (libtorch's, our kernels') comes first.
    check_cuda(cudaEventRecord(ready_, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    const ncclResult_t r = launch();
    if (r != ncclSuccess) fail(what, ncclGetErrorString(r));
    wait(what);
  }
  // Polls the stream so a dead peer turns into an error after timeout_s instead of a hang.
  void wait(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s_ * 1000));
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) fail(what, cudaGetErrorString(e));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess) fail(what, ncclGetErrorString(async));
      if (std::chrono::steady_clock::now() > deadline) fail(what, "timed out after dist.timeout_s");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  [[noreturn]] void fail(const char* what, const std::string& error) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    throw PeerFailure(roll_call(*store_, env_, what, error, std::min(timeout_s_, 10.0)));
  }

  LaunchEnv env_;
  double timeout_s_;
  c10::intrusive_ptr<c10d::Store> store_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* buffer_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, double timeout_s) {
  const std::string why = nccl_unavailable_reason();
  if (!why.empty()) throw UserError("dist.backend nccl cannot run here: " + why);
  return std::make_unique<NcclCommunicator>(env, timeout_s);
}
#else
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv&, double) {
  throw UserError("dist.backend nccl cannot run here: " + nccl_unavailable_reason());
}
#endif

}  // namespace unstuck::dist
