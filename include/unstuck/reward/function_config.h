// Options of a user's Python reward function (reward.function), run by the reward workers
// (unstuck/reward/worker_pool.h). Header-only options; validate() lives in src/reward/verifier.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "unstuck/common/value_names.h"

namespace unstuck::reward {

// How the function is called: verl's compute_score per completion, or a TRL reward function per batch.
enum class FunctionStyle { verl, trl };
inline constexpr std::array<std::pair<FunctionStyle, const char*>, 2> kFunctionStyleNames{{
    {FunctionStyle::verl, "verl"},
    {FunctionStyle::trl, "trl"},
}};
constexpr const auto& enum_names(FunctionStyle) { return kFunctionStyleNames; }

// True when `path` can name a module rather than a file: verl's "pkg://a.b.c", or "a.b.c" (no slash,
// no .py); a file of that name, where there is one, wins.
inline bool names_a_module(const std::string& path) {
  if (path.rfind("pkg://", 0) == 0) return true;
  if (path.empty() || path.find('/') != std::string::npos) return false;
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, ".py") == 0) return false;
  bool start = true;
  for (const char c : path) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == '.' ? start : !(letter || (!start && c >= '0' && c <= '9'))) return false;
    start = c == '.';
  }
  return !start;
}

struct FunctionConfig {
  std::string path;                    // the Python file; empty = no function (a built-in verifier scores)
  std::string name = "compute_score";  // the function in it
  FunctionStyle style = FunctionStyle::verl;
  std::string python;                   // the interpreter; empty: reward_python()'s choice
  std::vector<std::string> pythonpath;  // folders first on the worker's sys.path
  Mapping kwargs;                       // keywords added to every call (verl's reward_kwargs)
  bool factory = false;                 // name is a factory: called once with factory_kwargs, its result scores
  Mapping factory_kwargs;
  int workers = 2;                // worker processes
  int batch_size = 64;            // completions per request
  double timeout_s = 60.0;        // a request's limit
  double start_timeout_s = 60.0;  // a worker's start, from its launch to ready (the import)
  int64_t memory_mb = 8192;       // address-space limit of each worker; 0 = none
  double max_error_frac = 0.5;    // a step whose failed completions exceed this fraction stops the run

  template <class V>
  void visit(V& v) {
    v("path", path,
      "your reward function's Python file (a file inside a package is imported as part of it), or "
      "a module: pkg://a.b.c as verl takes it, or a.b.c; run out of process by reward workers; empty: "
      "the built-in verifier scores");
    v("name", name, "the function's name in the file");
    v("style", style,
      "verl: name(data_source=, solution_str=, ground_truth=, extra_info=) per completion, a number or a dict "
      "with 'score', as verl calls compute_score; trl: name(prompts=, completions=, completion_ids=, "
      "trainer_state=, log_extra=, log_metric=, **columns) per batch, a list of numbers or None, as TRL 1.16 "
      "calls reward functions; async functions are awaited");
    v("kwargs", kwargs,
      "keyword arguments added to every call, winning over the passed ones (verl's "
      "custom_reward_function.reward_kwargs), e.g. {method: flexible, format_score: 0.0}");
    v("factory", factory,
      "name is a factory (TRL's get_cosine_scaled_reward, get_soft_overlong_punishment, ...): called once per "
      "worker with factory_kwargs, and what it returns is the reward function");
    v("factory_kwargs", factory_kwargs, "keyword arguments of the factory call (with factory: true)");
    v("python", python,
      "the Python interpreter that runs the function (with the packages it imports); empty: $VIRTUAL_ENV's, "
      "else ./.venv/bin/python where the run starts, else python3 on PATH");
    v("pythonpath", pythonpath,
      "folders put first on the worker's sys.path: pip install --target folders, a source checkout of the "
      "package path names");
    v("workers", workers, "worker processes scoring in parallel, in [1, 64]");
    v("batch_size", batch_size, "completions per request to a worker, >= 1");
    v("timeout_s", timeout_s,
      "seconds a request may take; then its completions score reward_error and the worker restarts");
    v("start_timeout_s", start_timeout_s,
      "seconds a worker may take to start (import your file) before it is refused at the run's start, or "
      "retried with back-off after a restart; in (0, 86400]");
    v("memory_mb", memory_mb, "address-space limit of each worker in MiB (RLIMIT_AS); 0 = none");
    v("max_error_frac", max_error_frac,
      "a step in which more than this fraction of the completions fail to score (an exception, a timeout, a "
      "non-number) stops the run with the first error; in [0, 1]");
  }
};

// The interpreter the workers of `f` run: f.python; or, when empty, $VIRTUAL_ENV/bin/python, else
// .venv/bin/python under the current folder, else "python3" (looked up on PATH).
std::string reward_python(const FunctionConfig& f);

}  // namespace unstuck::reward
