// The communicator's bookkeeping (bytes, time), the single-process backend and the backend choice
// (the launcher environment is read by launch_env.cpp).
#include "unstuck/dist/communicator.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace unstuck::dist {
namespace {

// World size 1: reductions are the identity, gathers copy.
class SingleProcessCommunicator final : public Communicator {
 public:
  SingleProcessCommunicator() : Communicator(0, 1) {}
  const char* backend_name() const override { return "single"; }

 protected:
  void do_all_reduce(void*, std::size_t, DataType) override {}
  void do_reduce_scatter(const void* in, void* out, std::size_t n, DataType t) override { copy(in, out, n, t); }
  void do_all_gather(const void* in, void* out, std::size_t n, DataType t) override { copy(in, out, n, t); }
  void do_broadcast(void*, std::size_t, DataType, int) override {}
  void do_barrier() override {}

 private:
  static void copy(const void* in, void* out, std::size_t n, DataType t) {
    if (in != out) std::memmove(out, in, n * element_size(t));
  }
};

}  // namespace

std::size_t element_size(DataType type) {
  switch (type) {
    case DataType::f32:
      return 4;
    case DataType::f64:
      return 8;
    case DataType::i64:
      return 8;
    case DataType::u8:
      return 1;
  }
  return 1;
}

template <class F>
void Communicator::timed(uint64_t bytes, F&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.bytes += world_size_ > 1 ? bytes : 0;
  ++stats_.calls;
}

void Communicator::all_reduce_sum(void* data, std::size_t count, DataType type) {
  const uint64_t buffer = count * element_size(type);
  timed(2 * buffer * uint64_t(world_size_ - 1) / uint64_t(world_size_), [&] { do_all_reduce(data, count, type); });
}

void Communicator::reduce_scatter_sum(const void* input, void* output, std::size_t count, DataType type) {
  timed(count * element_size(type) * uint64_t(world_size_ - 1), [&] { do_reduce_scatter(input, output, count, type); });
}

void Communicator::all_gather(const void* input, void* output, std::size_t count, DataType type) {
  timed(count * element_size(type) * uint64_t(world_size_ - 1), [&] { do_all_gather(input, output, count, type); });
}

void Communicator::broadcast(void* data, std::size_t count, DataType type, int root) {
  if (root < 0 || root >= world_size_)
    throw std::invalid_argument("broadcast: root " + std::to_string(root) + " outside the world");
  timed(count * element_size(type), [&] { do_broadcast(data, count, type, root); });
}

void Communicator::barrier() {
  timed(0, [&] { do_barrier(); });
}

bool Communicator::any(bool flag) {
  double x = flag ? 1.0 : 0.0;
  all_reduce_sum(&x, 1);
  return x > 0;
}

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

std::unique_ptr<Communicator> make_communicator(const DistConfig& config, const LaunchEnv& env) {
  if (config.backend == DistBackend::nccl) return make_nccl_communicator(env, config.timeout_s);
  if (env.world_size == 1) return make_single_process_communicator();
  return make_gloo_communicator(env, config.timeout_s);
}

}  // namespace unstuck::dist
