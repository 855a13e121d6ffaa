// MemoryWatch: one thread reading the ceiling every kPollMilliseconds; past kStopFraction it keeps
// the reading and stops, and check() turns it into the error on the run's own thread.
#include "train/memory_watch.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "unstuck/common/error.h"
#include "unstuck/train/memory_plan.h"
#include "unstuck/train/checkpoint.h"

namespace unstuck::train {

MemoryWatch::MemoryWatch(std::filesystem::path run_dir, double planned_peak, std::string knob)
    : run_dir_(std::move(run_dir)), planned_peak_(planned_peak), knob_(std::move(knob)) {
  cgroup_ = cgroup_memory_ceiling().limit > 0;
  if (cgroup_ || host_memory_ceiling().limit > 0) thread_ = std::thread([this] { watch(); });
}

MemoryWatch::~MemoryWatch() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
}

void MemoryWatch::watch() {
  while (!done_) {
    const MemoryCeiling c = cgroup_ ? cgroup_memory_ceiling() : host_memory_ceiling();
    if (c.limit > 0 && c.used > kStopFraction * c.limit) {
      const std::lock_guard<std::mutex> lock(mutex_);
      reading_ = c;
      tripped_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMilliseconds));
  }
}

void MemoryWatch::check() const {
  if (!tripped_) return;
  MemoryCeiling c;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    c = reading_;
  }
  const std::filesystem::path last = latest_checkpoint(run_dir_ / "checkpoints");
  throw UserError(fmt::format(
      "train: stopped during step {} before the kernel's out-of-memory killer: {} in use of the {} limit {} ({}, "
      "over {:.0f}%); the plan's peak is {} per rank. {}; free memory (other processes count against the same "
      "limit) or {}{}",
      step_.load(), format_bytes(c.used), cgroup_ ? "cgroup memory" : "machine's memory", format_bytes(c.limit),
      c.source, kStopFraction * 100, format_bytes(planned_peak_),
      last.empty() ? "No checkpoint was written yet" : "The last checkpoint, " + last.string() + ", is intact", knob_,
      last.empty() ? "" : ", then continue with `unstuck train --resume " + run_dir_.string() + "`"));
}

}  // namespace unstuck::train
