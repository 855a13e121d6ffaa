// TCP store rendezvous and the roll call after a failed collective.
#include "dist/rendezvous.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "unstuck/dist/communicator.h"

namespace unstuck::dist {

std::string short_error(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  const auto end = text.find('\n');
  if (end != std::string::npos) text.resize(end);
  // Gloo's closing advice ("This is typically caused by a remote worker crashing. ... GLHF!") says
  // nothing the roll call does not.
  const auto advice = text.find(". This is typically caused by");
  if (advice != std::string::npos) text.resize(advice);
  return text;
}

c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& env, double timeout_s) {
  c10d::TCPStoreOptions o;
  o.port = uint16_t(env.master_port);
  o.isServer = env.rank == 0;
  o.numWorkers = std::size_t(env.world_size);
  o.waitWorkers = true;
  o.timeout = std::chrono::milliseconds(int64_t(timeout_s * 1000));
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  } catch (const std::exception& e) {
    const std::string why = short_error(e);
    const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
    const std::string prefix = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ": ";
    if (env.rank == 0 && (why.find("EADDRINUSE") != std::string::npos || why.find("in use") != std::string::npos))
      throw PeerFailure(prefix + "port " + std::to_string(env.master_port) +
                        " (MASTER_PORT) is already in use by "
                        "another process; choose another port (`unstuck launch --master-port 0` picks a free one)");
    throw PeerFailure(prefix + "rendezvous at " + where +
                      " failed within dist.timeout_s = " + std::to_string(timeout_s) +
                      " s (are all ranks started, is MASTER_ADDR/MASTER_PORT right?): " + why);
  }
}

namespace {

// c10's warnings off while it lives: a TCPStore call to a dead host logs its exception with the
// whole C++ backtrace ("sendBytes failed ... Broken pipe", 26 lines) before throwing it, and the
// roll call reports that failure in its own one line.
class QuietC10Warnings {
 public:
  QuietC10Warnings() : saved_(FLAGS_caffe2_log_level) { FLAGS_caffe2_log_level = std::max(saved_, 2); }  // 2: errors
  ~QuietC10Warnings() { FLAGS_caffe2_log_level = saved_; }
  QuietC10Warnings(const QuietC10Warnings&) = delete;
  QuietC10Warnings& operator=(const QuietC10Warnings&) = delete;

 private:
  int saved_;
};

}  // namespace

std::string roll_call(c10d::Store& store, const LaunchEnv& env, const std::string& what, const std::string& error,
                      double wait_s) {
  const QuietC10Warnings quiet;
  const std::string prefix = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ": ";
  const std::string cause = " (" + what + " failed: " + error + ")";
  const auto key = [](int r) { return "unstuck/alive_after_failure/" + std::to_string(r); };
  std::vector<int> missing;
  try {
    store.set(key(env.rank), std::vector<uint8_t>{1});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(wait_s * 1000));
    do {
      missing.clear();
      for (int r = 0; r < env.world_size; ++r)
        if (r != env.rank && !store.check({key(r)})) missing.push_back(r);
      if (missing.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
  } catch (const std::exception&) {
    return prefix + "rank 0 (the rendezvous store host at " + env.master_addr + ":" + std::to_string(env.master_port) +
           ") is gone" + cause;
  }
  if (missing.empty()) return prefix + "a collective failed although every rank answered" + cause;
  std::string names;
  for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
  return prefix + (missing.size() == 1 ? "rank " : "ranks ") + names + " died or stopped answering" + cause;
}

}  // namespace unstuck::dist
