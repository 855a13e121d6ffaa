// Options of the code verifier (reward.verifier: code): how the program is taken from a completion,
// how it is scored, and the limits of the sandbox each run gets (unstuck/reward/sandbox.h).
// Header-only options; validate() lives in src/reward/verifier.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace unstuck::reward {

// Which part of the completion is the program.
enum class CodeExtract { last_block, first_block, answer_tag, whole };
inline constexpr std::array<std::pair<CodeExtract, const char*>, 4> kCodeExtractNames{{
    {CodeExtract::last_block, "last_block"},
    {CodeExtract::first_block, "first_block"},
    {CodeExtract::answer_tag, "answer_tag"},
    {CodeExtract::whole, "whole"},
}};
constexpr const auto& enum_names(CodeExtract) { return kCodeExtractNames; }

struct CodeConfig {
  std::string python = "python3";  // the interpreter that runs the programs (looked up on PATH)
  CodeExtract extract = CodeExtract::last_block;
  bool partial = false;           // reward = the fraction of tests passed instead of all-or-nothing
  int workers = 2;                // sandboxes running at once
  double cpu_s = 5.0;             // CPU seconds of one sandbox (RLIMIT_CPU)
  double wall_s = 10.0;           // wall-clock seconds of one sandbox
  int64_t memory_mb = 1024;       // address space of one sandbox (RLIMIT_AS)
  int64_t file_mb = 16;           // largest file the program may write (RLIMIT_FSIZE)
  int64_t max_disk_mb = 64;       // all a program may write (its folder is a tmpfs of this size)
  int processes = 16;             // processes (and threads) a sandbox may hold (RLIMIT_NPROC in its own user namespace)
  int64_t output_kb = 1024;       // stdout + stderr kept; more kills the run
  int max_tests = 64;             // tests of a record that run; the rest are ignored (and counted)
  bool require_isolation = true;  // refuse to start without namespaces and Landlock
  std::vector<std::string> read_paths;  // extra folders the programs may read (the interpreter's are added)

  template <class V>
  void visit(V& v) {
    v("python", python, "the Python interpreter that runs the programs (with the packages they import)");
    v("extract", extract,
      "the program: last_block (the last ``` fenced block), first_block (the first one), answer_tag (the "
      "last <answer>...</answer>), whole (the completion as it is)");
    v("partial", partial, "reward = fraction of the record's tests passed; false: 1 only when all pass");
    v("workers", workers, "sandboxes running at once, in [1, 256]");
    v("cpu_s", cpu_s, "CPU seconds one sandbox may use (all its tests for asserts, one input for input_output)");
    v("wall_s", wall_s, "wall-clock seconds one sandbox may run");
    v("memory_mb", memory_mb, "address-space limit of a sandbox in MiB");
    v("file_mb", file_mb, "largest file a program may write, in MiB");
    v("max_disk_mb", max_disk_mb,
      "all a program may write, in MiB, in [1, 65536]: its folder is a tmpfs of this size (memory), gone "
      "with the program");
    v("processes", processes, "processes and threads a sandbox may hold");
    v("output_kb", output_kb, "stdout and stderr a sandbox may print, in KiB; more ends it (wrong)");
    v("max_tests", max_tests, "tests of a record that run, >= 1");
    v("require_isolation", require_isolation,
      "refuse to start when the kernel lacks user/PID/network/mount namespaces or Landlock; false: run with "
      "the resource limits alone and say so");
    v("read_paths", read_paths, "extra folders the programs may read (the interpreter's prefix is added)");
  }
};

}  // namespace unstuck::reward
