// main() of test_dist: in a worker process (UNSTUCK_TEST_WORKER set) run that worker, otherwise
// the GoogleTest suites.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>

#include "dist/dist_workers.h"
#include "unstuck/dist/launcher.h"

namespace unstuck::dist::testing {
namespace {

std::map<std::string, WorkerFn>& registry() {
  static std::map<std::string, WorkerFn> workers;
  return workers;
}

}  // namespace

bool register_worker(const std::string& name, WorkerFn fn) {
  registry()[name] = fn;
  return true;
}

int run_workers(const std::string& name, int world, const std::filesystem::path& dir,
                const std::map<std::string, std::string>& env) {
  LaunchOptions o;
  o.command = {std::filesystem::read_symlink("/proc/self/exe").string()};
  o.nproc = world;
  o.grace_s = 5;
  o.env = env;
  o.env["UNSTUCK_TEST_WORKER"] = name;
  o.env["UNSTUCK_TEST_DIR"] = dir.string();
  return launch_local(o, std::cerr);
}

std::filesystem::path worker_dir() {
  const char* d = std::getenv("UNSTUCK_TEST_DIR");
  return d ? d : "";
}

}  // namespace unstuck::dist::testing

int main(int argc, char** argv) {
  if (const char* name = std::getenv("UNSTUCK_TEST_WORKER")) {
    const auto& workers = unstuck::dist::testing::registry();
    const auto it = workers.find(name);
    if (it == workers.end()) {
      std::cerr << "unknown test worker '" << name << "'\n";
      return 99;
    }
    try {
      return it->second();
    } catch (const std::exception& e) {
      std::cerr << "worker " << name << ": " << e.what() << "\n";
      return 98;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
