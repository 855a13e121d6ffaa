// Reward workers: persistent child processes that score batches of completions for the trainer,
// so a user's reward code is loaded once, runs beside the trainer's threads, and cannot crash it.
// Each worker speaks JSON lines over a socket on its stdin and stdout (docs/TASKS.md, "Reward
// workers"):
//   worker -> {"ready": true}                      once, when it can score (or {"fatal": "why"} and exit)
//   pool   -> {"id": 7, "items": [ITEM, ...]}      one request per batch; ITEM is the caller's JSON
//   worker -> {"id": 7, "results": [R, ...]}       one R per item: {"score": x, "extra": {"k": v}}
//                                                  or {"error": "why"}
//          or {"id": 7, "error": "why"}            the whole batch failed
// A worker that answers late (timeout_s), dies, or answers anything else fails its batch with a
// named error and is restarted beside the others' scoring (their deadlines never wait on it); a
// restart that fails is retried with back-off, and while no worker can be started the batches score
// that error. A worker whose function ran out of memory is recycled. A worker that cannot start at
// construction is a UserError.
// The Python worker (python_reward_worker_argv) runs verl- and TRL-style reward functions.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace unstuck::reward {

struct WorkerOptions {
  std::vector<std::string> argv;  // the worker's command line (argv[0] looked up on PATH)
  std::string name;               // what the messages call it, e.g. "reward.function my_reward.py:compute_score"
  int workers = 2;                // processes scoring batches in parallel
  double timeout_s = 60.0;        // a request's limit, from its send to its answer
  double start_timeout_s = 60.0;  // from the start to {"ready": true}
  int64_t memory_mb = 8192;       // address-space limit of each worker (RLIMIT_AS); 0 = none
};

// One item's outcome.
struct WorkerResult {
  bool ok = false;
  bool none = false;                                  // ok, and the function returned None: not applicable (TRL)
  double score = 0.0;                                 // finite when ok and not none
  nlohmann::json extra = nlohmann::json::object();    // named numbers: a dict result's other keys, TRL's log_extra
  nlohmann::json columns = nlohmann::json::object();  // named values that are not numbers (text, bools, null)
  nlohmann::json metrics = nlohmann::json::object();  // TRL's log_metric of the call: {"name": [values]}
  std::string error;                                  // when !ok: the function's error, or the worker's
  nlohmann::json value;  // {"value": V}: a worker that answers with data, not a score (the tool workers)
};

// One item of a worker's answer, {"score": x, "extra": {...}, "columns": {...}, "metrics": {...}},
// {"none": true}, {"value": V} or {"error": "..."}, as the pool reads it: a score must be finite and within
// float32's range (the trainer's rewards are float32); extras and metrics are finite numbers.
WorkerResult worker_item_result(const nlohmann::json& item);

class WorkerPool {
 public:
  // Starts every worker and waits for each one's ready line. Throws UserError naming options.name
  // and the reason: the worker's {"fatal": ...} message, its exit, or the start timeout.
  explicit WorkerPool(WorkerOptions options);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Scores the batches, each on one worker, at most `workers` at once; returns one result per item
  // of each batch, in order. Never throws for a worker's failure: that is the batch's error.
  // `state`, when not null, goes with every request as its "state" (the trainer's step, for TRL's
  // trainer_state). `cancel`, when given and set (the trainer's SIGINT flag), gives up within 0.25 s:
  // the busy workers are stopped (a later call starts them again) and Interrupted is thrown.
  // `pinned`, when not empty, names each batch's worker (index modulo `workers`; -1: any): a worker
  // that holds state for it (tools.environment's instances). A pinned batch waits for its worker,
  // and fails with the reason when that worker cannot be started again.
  std::vector<std::vector<WorkerResult>> run(const std::vector<nlohmann::json>& batches,
                                             const nlohmann::json& state = nullptr,
                                             const std::atomic<bool>* cancel = nullptr,
                                             const std::vector<int64_t>& pinned = {});

  int64_t restarts() const { return restarts_; }
  const WorkerOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class State { down, starting, ready };
  struct Worker {
    pid_t pid = -1;             // the worker's init (PID 1 of its namespace), or the worker itself
    bool through_init = false;  // pid is an init, which reports a death by signal N as exit 128 + N
    int fd = -1;                // our end of the socket pair (the worker's stdin and stdout)
    std::string buffer;         // bytes received and not yet parsed as a line
    State state = State::down;
    Clock::time_point start_deadline;  // starting: the ready line is due by then
    Clock::time_point retry_at;        // down: the next start
    int failed_starts = 0;             // in a row
    std::string why_down;              // the last start's failure
  };
  void spawn(Worker& w);           // starting (or down, saying why)
  void check_start(Worker& w);     // starting -> ready or down (or still starting), without blocking
  void start_blocking(Worker& w);  // spawn, then wait for ready; UserError naming why not
  void stop(Worker& w);
  void restart(Worker& w);  // stop + spawn, without waiting
  void down(Worker& w, const std::string& why);
  class Round;  // one run(): the batches waiting, which worker scores which, the results

  WorkerOptions options_;
  std::vector<Worker> workers_;
  int64_t next_id_ = 0;
  int64_t restarts_ = 0;
};

// The argv of the Python reward worker bundled with Unstuck, for `python` (an interpreter
// path): it imports `path`, finds function `name` and checks that it takes the arguments `style`
// calls it with, then serves requests. Styles: "verl" calls name(data_source=, solution_str=,
// ground_truth=, extra_info=) per item (a number, or a dict with "score"); "trl" calls
// name(prompts=[...], completions=[...], completion_ids=[...], trainer_state=, log_extra=,
// log_metric=, <every other column>=[...]) once per batch and expects one number or None per
// completion (src/reward/reward_worker.py has the whole contract). ITEMs: verl {"data_source",
// "solution_str", "ground_truth", "extra_info"}; trl {"prompt", "completion", "completion_ids",
// "columns": {"name": value}}. Options after these: --kwargs JSON, --factory-kwargs JSON, --pythonpath DIR.
std::vector<std::string> python_reward_worker_argv(const std::string& python, const std::string& path,
                                                   const std::string& name, const std::string& style);

// The bundled worker's source (src/reward/reward_worker.py, compiled in).
const char* python_reward_worker_source();

}  // namespace unstuck::reward
