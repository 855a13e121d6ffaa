// The communicator: collectives on flat buffers between the ranks of a run (all-reduce,
// reduce-scatter, all-gather, broadcast, barrier), with three backends: single process, Gloo over
// libtorch's c10d (CPU, TCP) and NCCL (GPUs). Every call counts the bytes it moves and the time it
// takes, and a peer that died or stopped answering turns into a PeerFailure naming its rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "unstuck/dist/dist_config.h"
#include "unstuck/dist/launch_env.h"

namespace unstuck::dist {

enum class DataType { f32, f64, i64, u8 };
std::size_t element_size(DataType type);

template <class T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<float>() {
  return DataType::f32;
}
template <>
constexpr DataType data_type_of<double>() {
  return DataType::f64;
}
template <>
constexpr DataType data_type_of<int64_t>() {
  return DataType::i64;
}
template <>
constexpr DataType data_type_of<uint8_t>() {
  return DataType::u8;
}

// A collective failed because a rank died, closed its connections or did not answer within
// dist.timeout_s. The message names the rank(s).
class PeerFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the collectives of a communicator cost so far. `bytes` counts what each rank sends and
// receives in the bandwidth-optimal (ring) algorithm, the convention of nccl-tests' bus bandwidth:
// all-reduce 2 (W-1)/W x buffer, reduce-scatter and all-gather (W-1)/W x the full buffer,
// broadcast 1 x buffer; 0 at world size 1.
struct CommStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  double seconds = 0.0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual const char* backend_name() const = 0;

  // data[i] = sum over ranks of data[i], in place, `count` elements.
  void all_reduce_sum(void* data, std::size_t count, DataType type);
  // input: world_size * count elements; output[i] = sum over ranks of input[rank * count + i].
  void reduce_scatter_sum(const void* input, void* output, std::size_t count, DataType type);
  // input: count elements; output: world_size * count, rank r's input at r * count.
  void all_gather(const void* input, void* output, std::size_t count, DataType type);
  // Every rank's data becomes root's.
  void broadcast(void* data, std::size_t count, DataType type, int root);
  void barrier();

  template <class T>
  void all_reduce_sum(T* data, std::size_t count) {
    all_reduce_sum(static_cast<void*>(data), count, data_type_of<T>());
  }
  // True on every rank when `flag` is true on any rank.
  bool any(bool flag);

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  Communicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  virtual void do_all_reduce(void* data, std::size_t count, DataType type) = 0;
  virtual void do_reduce_scatter(const void* input, void* output, std::size_t count, DataType type) = 0;
  virtual void do_all_gather(const void* input, void* output, std::size_t count, DataType type) = 0;
  virtual void do_broadcast(void* data, std::size_t count, DataType type, int root) = 0;
  virtual void do_barrier() = 0;

 private:
  template <class F>
  void timed(uint64_t bytes, F&& call);
  int rank_, world_size_;
  CommStats stats_;
};

// The communicator of this process: single process at world size 1 (backend auto or gloo),
// otherwise Gloo or NCCL as `config.backend` says, after a rendezvous through a TCP store served by
// rank 0 at MASTER_ADDR:MASTER_PORT. Throws UserError when the backend is not available in this
// build or on this machine, PeerFailure when the rendezvous times out.
std::unique_ptr<Communicator> make_communicator(const DistConfig& config, const LaunchEnv& env);

// Backends, for tests and benchmarks that want a particular one.
std::unique_ptr<Communicator> make_single_process_communicator();
std::unique_ptr<Communicator> make_gloo_communicator(const LaunchEnv& env, double timeout_s);
// NCCL on the GPU of LOCAL_RANK: device buffers are used in place (no host staging), host buffers
// are staged through the GPU. Gloo and the single-process backend take host buffers only.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, double timeout_s);
// Why NCCL cannot run here ("" when it can): not compiled in, or no usable GPU.
std::string nccl_unavailable_reason();

}  // namespace unstuck::dist
