// Gloo backend: libtorch's c10d ProcessGroupGloo over the TCP store. Buffers are wrapped as CPU
// tensors without copies. A failed or timed-out collective becomes a PeerFailure naming the rank
// that died or hangs (roll call through the store).
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <ifaddrs.h>
#include <net/if.h>
#include <torch/version.h>

#include <cstdlib>
#include <string>

#include "dist/rendezvous.h"
#include "unstuck/dist/communicator.h"

// The PyPI wheel ships ProcessGroupGloo.hpp but not the gloo headers it includes, so the few
// exported entry points we call are declared here. Nothing of the classes' layouts is relied on
// (the members of ProcessGroupGloo::Options moved between releases: global_ranks_in_group went to
// Backend::Options), so the declaration holds for every libtorch with these signatures (our pin
// 2.14 and the GPU machine's 2.11; scripts/gpu_check.sh compiles against the latter): the options
// come from create_default(), which reads
// GLOO_SOCKET_IFNAME, and the object is allocated with room to spare (kReserved) because its real
// size is not visible here. It is only ever used through c10d::Backend.
namespace c10d {
class ProcessGroupGloo : public Backend {
 public:
  struct Options : public Backend::Options {
    explicit Options(std::chrono::milliseconds timeout);
    static c10::intrusive_ptr<Options> create_default(std::chrono::milliseconds timeout);
  };
  ProcessGroupGloo(const c10::intrusive_ptr<Store>& store, int rank, int size, c10::intrusive_ptr<Options> options);
  ~ProcessGroupGloo() override;

 private:
  static constexpr std::size_t kReserved = 16384;
  alignas(64) unsigned char reserved_[kReserved];
};
}  // namespace c10d

namespace unstuck::dist {
namespace {

at::ScalarType scalar_type(DataType t) {
  switch (t) {
    case DataType::f32:
      return at::kFloat;
    case DataType::f64:
      return at::kDouble;
    case DataType::i64:
      return at::kLong;
    case DataType::u8:
      return at::kByte;
  }
  return at::kByte;
}

at::Tensor wrap(const void* data, std::size_t count, DataType t) {
  return at::from_blob(const_cast<void*>(data), {int64_t(count)}, at::TensorOptions().dtype(scalar_type(t)));
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

// Name of this machine's loopback interface ("lo" on Linux), "" if none is up.
std::string loopback_interface() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* a = list; a; a = a->ifa_next)
    if ((a->ifa_flags & IFF_LOOPBACK) && (a->ifa_flags & IFF_UP) && a->ifa_name) {
      name = a->ifa_name;
      break;
    }
  freeifaddrs(list);
  return name;
}

// Gloo options as torch.distributed makes them: GLOO_SOCKET_IFNAME when set, else (for a
// single-machine run) the loopback interface, else the address this host's name resolves to.
// create_default() reads the variable, so for the loopback case it is set for the duration of the
// call and removed again.
c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options(const LaunchEnv& env,
                                                                 std::chrono::milliseconds timeout) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  const std::string lo = (ifname && *ifname) || !is_loopback(env.master_addr) ? "" : loopback_interface();
  if (lo.empty()) return c10d::ProcessGroupGloo::Options::create_default(timeout);
  setenv("GLOO_SOCKET_IFNAME", lo.c_str(), 1);
  try {
    auto options = c10d::ProcessGroupGloo::Options::create_default(timeout);
    unsetenv("GLOO_SOCKET_IFNAME");
    return options;
  } catch (...) {
    unsetenv("GLOO_SOCKET_IFNAME");
    throw;
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const LaunchEnv& env, double timeout_s)
      : Communicator(env.rank, env.world_size), env_(env), timeout_s_(timeout_s) {
    store_ = connect_store(env, timeout_s);
    const auto timeout = std::chrono::milliseconds(int64_t(timeout_s * 1000));
    try {
      group_ =
          c10::make_intrusive<c10d::ProcessGroupGloo>(store_, env.rank, env.world_size, gloo_options(env, timeout));
    } catch (const std::exception& e) {
      fail("connecting the gloo process group", e);
    }
  }
  const char* backend_name() const override { return "gloo"; }

 protected:
  void do_all_reduce(void* data, std::size_t count, DataType type) override {
    std::vector<at::Tensor> t{wrap(data, count, type)};
    run("all_reduce", [&] { return group_->allreduce(t); });
  }
  void do_reduce_scatter(const void* input, void* output, std::size_t count, DataType type) override {
    at::Tensor in = wrap(input, count * std::size_t(world_size()), type), out = wrap(output, count, type);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
    run("reduce_scatter", [&] { return group_->reduce_scatter_single(out, in); });
#else  // the older name (still there, deprecated, in 2.14)
    run("reduce_scatter", [&] { return group_->_reduce_scatter_base(out, in); });
#endif
  }
  void do_all_gather(const void* input, void* output, std::size_t count, DataType type) override {
    at::Tensor in = wrap(input, count, type), out = wrap(output, count * std::size_t(world_size()), type);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
    run("all_gather", [&] { return group_->all_gather_single(out, in); });
#else
    run("all_gather", [&] { return group_->_allgather_base(out, in); });
#endif
  }
  void do_broadcast(void* data, std::size_t count, DataType type, int root) override {
    std::vector<at::Tensor> t{wrap(data, count, type)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run("broadcast", [&] { return group_->broadcast(t, o); });
  }
  void do_barrier() override {
    run("barrier", [&] { return group_->barrier(); });
  }

 private:
  template <class F>
  void run(const char* what, F&& start) {
    try {
      start()->wait();
    } catch (const std::exception& e) {
      fail(what, e);
    }
  }
  [[noreturn]] void fail(const std::string& what, const std::exception& e) {
    throw PeerFailure(roll_call(*store_, env_, what, short_error(e), std::min(timeout_s_, 10.0)));
  }

  LaunchEnv env_;
  double timeout_s_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> group_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const LaunchEnv& env, double timeout_s) {
  return std::make_unique<GlooCommunicator>(env, timeout_s);
}

}  // namespace unstuck::dist
