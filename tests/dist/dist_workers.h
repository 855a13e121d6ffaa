// Test harness for multi-process tests: the test binary re-runs itself as the ranks of a run.
// A test calls run_workers("name", W); each rank's process finds UNSTUCK_TEST_WORKER=name in its
// environment, runs the registered worker function (with RANK, WORLD_SIZE, ... from the launcher)
// and exits with its return value.
#pragma once

#include <filesystem>
#include <map>
#include <string>

namespace unstuck::dist::testing {

using WorkerFn = int (*)();
// Registers `fn` under `name`; returns true (for a namespace-scope `const bool` initializer).
bool register_worker(const std::string& name, WorkerFn fn);
// Runs worker `name` as `world` ranks on loopback (gloo) and returns the launcher's exit status
// (0 when every rank returned 0). `dir` is passed to the workers as UNSTUCK_TEST_DIR.
int run_workers(const std::string& name, int world, const std::filesystem::path& dir = {},
                const std::map<std::string, std::string>& env = {});
// UNSTUCK_TEST_DIR of a worker.
std::filesystem::path worker_dir();

}  // namespace unstuck::dist::testing
