// Private: progress inside a GRPO step. A step that runs longer than a few seconds (a real model
// on a CPU: minutes) shows where it is: the rollout's rows and tokens, then the update's chunks. The
// lines are rate-limited and go to the console and train.log; a short step prints nothing here
// (its metrics line says everything). The same points check the run's memory ceiling.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "train/memory_watch.h"
#include "unstuck/rollout/sampler.h"

namespace unstuck::train {

class StepProgress {
 public:
  // Silent for the first `quiet_s` seconds of a step, then at most one line every `every_s` seconds.
  explicit StepProgress(double quiet_s = 5.0, double every_s = 10.0) : quiet_s_(quiet_s), every_s_(every_s) {}

  // Each progress point below first asks `watch` (when set) whether the memory ceiling is near,
  // which throws its named error.
  void watch(const MemoryWatch* watch) { watch_ = watch; }

  void start_step(int64_t step);
  // After each decode step of the rollout (rows of this rank).
  void rollout(const rollout::GenerateProgress& p);
  // Before forward chunk `chunk` (1-based) of `chunks` of `phase` ("update": forward/backward of
  // optimizer pass `pass` of `passes`; "measure": the log-prob pass before the update).
  void chunk(const char* phase, int64_t chunk, int64_t chunks, int64_t pass = 1, int64_t passes = 1);
  // Before the optimizer step of pass `pass` of `passes` (it can take seconds at billions of weights).
  void optimizer(int64_t pass, int64_t passes);

 private:
  double since_start() const;
  bool due();  // quiet time over and the last line far enough back; marks the line as printed
  void check_memory() const {
    if (watch_) watch_->check();
  }

  double quiet_s_, every_s_;
  int64_t step_ = 0;
  std::chrono::steady_clock::time_point start_, rollout_start_;
  double last_line_ = -1e9;
  const MemoryWatch* watch_ = nullptr;
};

}  // namespace unstuck::train
