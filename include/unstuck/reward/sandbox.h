// The sandbox the code verifier runs untrusted programs in. Each job runs as a child of the
// launcher `unstuck-sandbox` (src/reward/launcher/): in new user, PID, network, IPC, UTS and mount
// namespaces where the kernel allows (no network, no view of other processes, everything killed
// when it ends, a private root holding only the system's and the interpreter's folders read-only
// and its own folder, a tmpfs of disk_mb), under Landlock where the kernel has it (reads only the
// system's and the interpreter's folders, writes only its fresh temporary folder, no TCP, no
// signals or abstract sockets out of its domain), with CPU-time, address-space, file-size,
// process-count and open-file limits, a clean environment, and its own empty temporary folder that
// is removed afterwards. The caller's side bounds wall time and output and kills the whole job when
// either runs out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unstuck::reward {

struct SandboxLimits {
  double cpu_s = 5.0;        // RLIMIT_CPU (rounded up to whole seconds)
  double wall_s = 10.0;      // from the start to the kill
  int64_t memory_mb = 1024;  // RLIMIT_AS
  int64_t file_mb = 16;      // RLIMIT_FSIZE
  int64_t disk_mb = 64;      // the job's folder: a tmpfs of this size (with namespaces)
  int processes = 16;        // RLIMIT_NPROC, counted in the job's own user namespace
  int64_t output_kb = 1024;  // stdout + stderr kept; more ends the job (output_limit)
  int open_files = 64;       // RLIMIT_NOFILE
};

// What the kernel lets the sandbox use (probed once per process).
struct SandboxCapabilities {
  bool namespaces = false;  // user + PID + network + mount (+ IPC, UTS) namespaces
  int landlock_abi = 0;     // 0: no Landlock
  std::string missing;      // "" when everything is there, else e.g. "Landlock (not in this kernel)"
  // One line for the run's start, e.g. "sandbox: user/PID/network namespaces, Landlock ABI 7".
  std::string describe() const;
};
SandboxCapabilities sandbox_capabilities();

struct SandboxJob {
  std::vector<std::string> argv;  // argv[0]: an absolute path, or a name looked up on PATH
  std::string stdin_data;         // written to the job's stdin, then stdin is closed
};

enum class SandboxEnd {
  exited,        // exit_code is its status
  signaled,      // killed by `signal` (the CPU limit: SIGXCPU / SIGKILL; memory: often SIGSEGV / SIGABRT)
  timed_out,     // ran past wall_s
  output_limit,  // printed more than output_kb
  failed,        // the sandbox itself could not be set up (`out`/`err` say why)
};

struct SandboxOutcome {
  SandboxEnd end = SandboxEnd::failed;
  int exit_code = -1;
  int signal = 0;
  std::string out, err;  // what it printed (at most output_kb together)
  double wall_s = 0.0;
};

struct SandboxOptions {
  SandboxLimits limits;
  int parallel = 2;                     // jobs at once
  bool require_isolation = true;        // UserError when the capabilities are not all there
  std::vector<std::string> read_paths;  // folders the job may read besides the system's
};

// Runs every job, at most options.parallel at once; one outcome per job, in order. Throws UserError
// when isolation is required and missing, or when the launcher cannot be found.
std::vector<SandboxOutcome> run_sandboxed(const std::vector<SandboxJob>& jobs, const SandboxOptions& options);

// The Python interpreter `python` (an executable path, or a name looked up on PATH) made ready for
// sandboxed jobs: its real executable (sys.executable, asked of it as the caller) is returned, its
// prefixes are added to options.read_paths, and it is proven to start in the sandbox under `options`.
// Throws UserError naming <key>.python (and `read_paths_key`, the key that adds folders, if any).
std::string sandboxed_python(const std::string& python, SandboxOptions& options, const std::string& key,
                             const std::string& read_paths_key);

// How a job ended, for messages: "exited with status 1: <stderr's tail>", "timed out after 2.0 s", ...
std::string outcome_text(const SandboxOutcome& outcome);

// The launcher executable: $UNSTUCK_SANDBOX when set, else unstuck-sandbox next to the running
// executable, else the build tree's (a compile-time path).
std::string sandbox_launcher_path();

// Removes a job's folder, whatever its depth, without following links and after making read-only
// folders writable again; stops (leaving the rest) where a folder was moved out from under it.
void remove_tree(const std::string& path);

}  // namespace unstuck::reward
