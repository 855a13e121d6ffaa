// Private: watches the memory ceiling the kernel enforces (the cgroup's limit, else the machine's
// memory and swap) while a run trains. The out-of-memory killer ends a process with SIGKILL and no
// word; a run that comes within kStopFraction of the ceiling mid-step is stopped first: a thread
// polls the ceiling, and the trainer's next progress point (each decode step of the rollout, each
// forward chunk, each optimizer pass) throws a UserError naming the ceiling, the step, the plan's
// peak and the last checkpoint, which stays intact (checkpoints are written between steps).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "unstuck/common/memory_usage.h"

namespace unstuck::train {

class MemoryWatch {
 public:
  static constexpr double kStopFraction = 0.95;  // of the ceiling
  static constexpr int kPollMilliseconds = 20;

  // Starts watching (a thread polling the ceiling) when one is known. `planned_peak`: the plan's
  // bytes, named in the error with `knob` ("lower grpo.prompts_per_step or ...").
  MemoryWatch(std::filesystem::path run_dir, double planned_peak, std::string knob);
  ~MemoryWatch();
  MemoryWatch(const MemoryWatch&) = delete;
  MemoryWatch& operator=(const MemoryWatch&) = delete;

  void set_step(int64_t step) { step_ = step; }
  // Throws the named UserError once the ceiling has been approached; called by the run's thread.
  void check() const;

 private:
  void watch();

  std::filesystem::path run_dir_;
  double planned_peak_;
  std::string knob_;
  bool cgroup_ = false;
  std::atomic<int64_t> step_{0};
  std::atomic<bool> done_{false}, tripped_{false};
  mutable std::mutex mutex_;
  MemoryCeiling reading_;  // the reading that tripped it (under mutex_)
  std::thread thread_;
};

}  // namespace unstuck::train
