// A Python interpreter made ready for sandboxed jobs (the code verifier's programs, the `python`
// tool's code): found on PATH, asked where it really lives, and proven to start in the sandbox.
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/reward/sandbox.h"

extern char** environ;

namespace unstuck::reward {
namespace {

namespace fs = std::filesystem;

// Runs `argv` as the caller (no sandbox: the user's own interpreter on our own question), its
// stdout into `out`; the exit status, or -1 when it cannot start.
int run_trusted(const std::vector<std::string>& argv, std::string& out) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return -1;
  }
  char chunk[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], chunk, sizeof chunk)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || out.size() > (1 << 20)) break;
    out.append(chunk, std::size_t(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string on_path(const std::string& name, const std::string& key) {
  const auto runnable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (!runnable(name)) throw UserError(key + ".python: " + name + " is not an executable file");
    return fs::absolute(name).string();
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && runnable(fs::path(dir) / name)) return fs::absolute(fs::path(dir) / name).string();
  throw UserError(key + ".python: '" + name + "' is not on PATH (" + (path ? path : "") + ")");
}

}  // namespace

std::string outcome_text(const SandboxOutcome& o) {
  const std::string err = o.err.size() > 400 ? "..." + o.err.substr(o.err.size() - 400) : o.err;
  switch (o.end) {
    case SandboxEnd::exited:
      return "exited with status " + std::to_string(o.exit_code) + (err.empty() ? "" : ": " + err);
    case SandboxEnd::signaled:
      return "was killed by signal " + std::to_string(o.signal) + (err.empty() ? "" : ": " + err);
    case SandboxEnd::timed_out:
      return "timed out after " + std::to_string(o.wall_s) + " s";
    case SandboxEnd::output_limit:
      return "printed more than the output limit";
    case SandboxEnd::failed:
      return err;
  }
  return err;
}

// The interpreter as the caller's PATH finds it, then where it really lives (its executable and
// prefixes, asked of it directly, as the caller: a pyenv shim or a venv link reads folders of its
// own that the sandbox's private root does not hold), then proof that it starts in the sandbox the
// programs get, where those folders are bound read-only.
std::string sandboxed_python(const std::string& python, SandboxOptions& options, const std::string& key,
                             const std::string& read_paths_key) {
  const std::string found = on_path(python, key);
  const char* ask = "import sys; print(sys.executable); print(sys.prefix); print(sys.base_prefix)";
  std::string answer;
  const int status = run_trusted({found, "-I", "-c", ask}, answer);
  std::vector<std::string> lines;
  std::istringstream out(answer);
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  if (status != 0 || lines.size() < 3 || lines[0].empty())
    throw UserError(key + ".python: " + found + " does not run (" +
                    (status < 0 ? std::string("cannot start it") : "exit status " + std::to_string(status)) +
                    (answer.empty() ? std::string() : ": " + answer.substr(0, 400)) + ")");
  const std::string executable = lines[0];
  std::set<std::string> reads(options.read_paths.begin(), options.read_paths.end());
  std::error_code ec;
  for (const fs::path& p :
       {fs::path(lines[1]), fs::path(lines[2]), fs::canonical(fs::path(executable).parent_path(), ec),
        fs::canonical(executable, ec).parent_path()})
    if (!p.empty()) reads.insert(p.string());
  options.read_paths.assign(reads.begin(), reads.end());
  const SandboxOutcome start = run_sandboxed({SandboxJob{{executable, "-I", "-c", "print('ok')"}, ""}}, options).at(0);
  if (start.end != SandboxEnd::exited || start.exit_code != 0 || start.out != "ok\n") {
    std::string folders;
    for (const std::string& r : reads) folders += (folders.empty() ? "" : ", ") + r;
    throw UserError(key + ".python: " + executable + " does not start in the sandbox with " + key + "'s limits: it " +
                    outcome_text(start) + " (it may read the system's folders and " + folders +
                    (read_paths_key.empty() ? std::string(")") : "; add what it needs to " + read_paths_key + ")"));
  }
  return executable;
}

}  // namespace unstuck::reward
