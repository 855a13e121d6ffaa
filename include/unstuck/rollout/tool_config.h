// Options of the policy's tools (the `tools` section; rollout/tools.h runs them). Header-only, free
// of libtorch, so the config can hold it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unstuck::rollout {

struct ToolSpec {
  std::string path;  // the Python file (or module, as reward.function.path takes it)
  std::string name;  // the function in it, which is also the tool's name

  template <class V>
  void visit(V& v) {
    v("path", path, "the Python file that defines the tool (or a module: pkg://a.b.c or a.b.c)");
    v("name", name, "the function: the tool's name, its docstring and type hints give its JSON schema");
  }
};

// TRL's environment_factory: a class (or a function returning an instance) whose instances hold one
// rollout's state; its public methods are tools, reset(**row) starts each rollout, get_reward() may
// score it.
struct EnvironmentSpec {
  std::string path;  // empty: no environment
  std::string name;

  template <class V>
  void visit(V& v) {
    v("path", path, "the Python file that defines the environment (or a module: pkg://a.b.c or a.b.c)");
    v("name", name,
      "the class (or a function returning an instance): one instance per rollout row; reset(**row) is called with "
      "the record's columns and prompt before the row is sampled (a string it returns is appended to the last "
      "prompt message); the public methods are tools; get_reward(), when defined, is added to the row's reward");
  }
};

struct ToolsConfig {
  std::vector<ToolSpec> functions;  // empty (and no builtin_python, no environment): no tools, one turn per row
  bool builtin_python = false;      // the built-in `python` tool (the code sandbox)
  EnvironmentSpec environment;      // TRL's environment_factory (path empty: none)
  int64_t max_iterations = 0;       // tool rounds per row; 0: as many as rollout.max_new_tokens allows
  std::string python;               // the interpreter; empty: reward.function.python's rule
  std::vector<std::string> pythonpath;
  int workers = 2;
  double timeout_s = 30.0;
  double start_timeout_s = 60.0;
  int64_t memory_mb = 4096;

  bool enabled() const { return !functions.empty() || builtin_python || !environment.path.empty(); }

  template <class V>
  void visit(V& v) {
    v("functions", functions,
      "the policy's tools, [{path, name}]: Python functions with type hints and a Google-style docstring, as "
      "TRL's GRPOTrainer(tools=[...]) takes them (the schema is derived as transformers' get_json_schema "
      "derives it and rendered by the chat template's tools branch); empty: no tools");
    v("builtin_python", builtin_python,
      "a built-in tool named python: the code the policy passes runs in the code sandbox (no network, a private "
      "root, tools.timeout_s of CPU and wall time, tools.memory_mb) and the model reads what it prints, or the "
      "error's last line");
    v("environment", environment,
      "TRL's environment_factory: {path, name} of a class whose instances hold a rollout's state (one per row, "
      "reused across steps as TRL's pool is); its public methods are the policy's tools beside tools.functions");
    v("max_iterations", max_iterations,
      "rounds of tool calls per completion (TRL's max_tool_calling_iterations); 0: as many as "
      "rollout.max_new_tokens holds");
    v("python", python,
      "the Python interpreter that runs the tools; empty: $VIRTUAL_ENV's, else ./.venv/bin/python, else python3");
    v("pythonpath", pythonpath, "folders put first on the tool workers' sys.path");
    v("workers", workers, "tool worker processes calling in parallel, in [1, 64]");
    v("timeout_s", timeout_s,
      "seconds one call may take; then the model reads an error as the call's result and the worker restarts");
    v("start_timeout_s", start_timeout_s, "seconds a tool worker may take to start (import the tools' files)");
    v("memory_mb", memory_mb, "address-space limit of each tool worker in MiB (RLIMIT_AS); 0 = none");
  }
};

}  // namespace unstuck::rollout
