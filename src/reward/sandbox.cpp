// The sandbox runner: one launcher (unstuck-sandbox, src/reward/launcher/) per job, each in a fresh
// temporary folder, all of them fed and read without blocking in one poll loop that bounds every
// job's wall time and output and kills the job whole when either runs out. The kernel's isolation
// features are probed once per process.
#include "unstuck/reward/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "unstuck/common/error.h"

#ifndef UNSTUCK_SANDBOX_BUILD_PATH
#define UNSTUCK_SANDBOX_BUILD_PATH ""
#endif

namespace unstuck::reward {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr long kLandlockCreateRuleset = 444;  // the same number on every architecture
constexpr unsigned kLandlockVersion = 1U << 0;
constexpr int kNamespaceFlags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS;
constexpr int kStatusFd = 3;  // the launcher's report (its protocol is in its header)

// "" when a child can make the launcher's namespaces and write its id maps, else why not.
std::string probe_namespaces() {
  const std::string uid = std::to_string(::geteuid()), gid = std::to_string(::getegid());
  const std::string uid_map = uid + " " + uid + " 1\n", gid_map = gid + " " + gid + " 1\n";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::string("fork: ") + std::strerror(errno);
  }
  if (pid == 0) {  // async-signal-safe calls only: the caller may be multi-threaded
    const auto put = [](const char* path, const std::string& text) {
      const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
      const bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size());
      if (fd >= 0) ::close(fd);
      return ok;
    };
    int step = 0;
    if (::unshare(kNamespaceFlags) != 0)
      step = 1;
    else if (!put("/proc/self/setgroups", "deny") && errno != ENOENT)
      step = 2;
    else if (!put("/proc/self/uid_map", uid_map))
      step = 3;
    else if (!put("/proc/self/gid_map", gid_map))
      step = 4;
    const int answer[2] = {step, errno};
    (void)!::write(fds[1], answer, sizeof answer);
    ::_exit(0);
  }
  ::close(fds[1]);
  int answer[2] = {-1, 0};
  const ssize_t n = ::read(fds[0], answer, sizeof answer);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (n != ssize_t(sizeof answer)) return "the probe died";
  static const char* const kSteps[] = {"", "unshare", "write setgroups", "write uid_map", "write gid_map"};
  return answer[0] == 0 ? "" : std::string(kSteps[answer[0]]) + ": " + std::strerror(answer[1]);
}

SandboxCapabilities probe_capabilities() {
  SandboxCapabilities caps;
  std::vector<std::string> missing;
  const std::string ns = probe_namespaces();
  caps.namespaces = ns.empty();
  if (!caps.namespaces) missing.push_back("user/PID/network/mount namespaces (" + ns + ")");
  const long abi = ::syscall(kLandlockCreateRuleset, nullptr, 0, kLandlockVersion);
  caps.landlock_abi = abi > 0 ? int(abi) : 0;
  if (abi <= 0) {
    missing.push_back(errno == ENOSYS ? "Landlock (not in this kernel)"
                      : errno == EOPNOTSUPP
                          ? "Landlock (built in but off: add landlock to the kernel's lsm= boot option)"
                          : std::string("Landlock (") + std::strerror(errno) + ")");
  }
  for (const std::string& m : missing) caps.missing += (caps.missing.empty() ? "" : ", ") + m;
  return caps;
}

// ---- one running job ----

struct Running {
  std::size_t index = 0;
  pid_t launcher = -1;
  int in = -1, out = -1, err = -1, status = -1;  // our ends of the job's pipes
  std::size_t written = 0;                       // of the job's stdin_data
  std::string report;                            // what the launcher wrote on its status fd
  std::string dir;
  Clock::time_point start, deadline;
  bool killed = false;
  SandboxOutcome outcome;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// A pipe whose ends sit above the standard descriptors and the status fd (so that the child's
// dup2 onto 0..3 never collides with them), close-on-exec; `ours` non-blocking.
bool make_pipe(int& read_end, int& write_end, bool ours_is_read) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  for (int& fd : p) {
    const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
    ::close(fd);
    fd = high;
  }
  if (p[0] < 0 || p[1] < 0) {
    close_fd(p[0]);
    close_fd(p[1]);
    return false;
  }
  read_end = p[0];
  write_end = p[1];
  const int ours = ours_is_read ? read_end : write_end;
  ::fcntl(ours, F_SETFL, ::fcntl(ours, F_GETFL) | O_NONBLOCK);
  return true;
}

std::string temp_base() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

std::vector<std::string> launcher_argv(const std::string& launcher, const std::string& dir, const SandboxJob& job,
                                       const SandboxOptions& o, const SandboxCapabilities& caps) {
  const SandboxLimits& l = o.limits;
  std::vector<std::string> a{launcher,
                             "--cpu",
                             std::to_string(std::max<long>(1, long(std::ceil(l.cpu_s)))),
                             "--memory-mb",
                             std::to_string(l.memory_mb),
                             "--file-mb",
                             std::to_string(l.file_mb),
                             "--disk-mb",
                             std::to_string(l.disk_mb),
                             "--processes",
                             std::to_string(l.processes),
                             "--open-files",
                             std::to_string(l.open_files),
                             "--dir",
                             dir,
                             "--namespaces",
                             caps.namespaces ? "yes" : "no",
                             "--landlock",
                             caps.landlock_abi > 0 ? "yes" : "no",
                             "--status-fd",
                             std::to_string(kStatusFd),
                             "--parent-pid",
                             std::to_string(::getpid())};
  for (const std::string& p : o.read_paths) {
    a.push_back("--read");
    a.push_back(p);
  }
  a.push_back("--");
  a.insert(a.end(), job.argv.begin(), job.argv.end());
  return a;
}

// Spawns the launcher for `job` (posix_spawn: no fork of a large caller); false with
// r.outcome.err saying why.
bool start_job(Running& r, const SandboxJob& job, const std::string& launcher, const SandboxOptions& o,
               const SandboxCapabilities& caps) {
  r.outcome.end = SandboxEnd::failed;
  if (job.argv.empty() || job.argv[0].empty()) {
    r.outcome.err = "sandbox: a job without a program";
    return false;
  }
  std::string tmpl = temp_base() + "/unstuck-sbx-XXXXXX";
  if (!::mkdtemp(tmpl.data())) {
    r.outcome.err = "sandbox: cannot create a folder in " + temp_base() + ": " + std::strerror(errno);
    return false;
  }
  r.dir = tmpl;
  int child[4] = {-1, -1, -1, -1};  // the job's stdin, stdout, stderr, status
  const bool piped = make_pipe(child[0], r.in, false) && make_pipe(r.out, child[1], true) &&
                     make_pipe(r.err, child[2], true) && make_pipe(r.status, child[3], true);
  const int spawn_errno = errno;
  pid_t pid = -1;
  int rc = spawn_errno;
  if (piped) {
    const std::vector<std::string> args = launcher_argv(launcher, r.dir, job, o, caps);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    char path_env[] = "PATH=/usr/bin:/bin";
    char* envp[] = {path_env, nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    ::posix_spawn_file_actions_init(&actions);
    for (int fd = 0; fd < 4; ++fd) ::posix_spawn_file_actions_adddup2(&actions, child[fd], fd);
    ::posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    ::posix_spawnattr_setsigmask(&attr, &none);  // the caller may block SIGPIPE (we do) or others
    ::posix_spawnattr_setsigdefault(&attr, &all);
    ::posix_spawnattr_setpgroup(&attr, 0);
    ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    rc = ::posix_spawn(&pid, launcher.c_str(), &actions, &attr, argv.data(), envp);
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attr);
  }
  for (int& fd : child) close_fd(fd);
  if (!piped || rc != 0) {
    r.outcome.err = std::string("sandbox: cannot start the launcher ") + launcher + ": " + std::strerror(rc) +
                    (rc == EMFILE ? " (too many open files: lower reward.code.workers or raise ulimit -n)" : "");
    return false;
  }
  r.launcher = pid;
  r.start = Clock::now();
  r.deadline = r.start + std::chrono::microseconds(int64_t(o.limits.wall_s * 1e6));
  if (job.stdin_data.empty()) close_fd(r.in);
  return true;
}

// The number after `key ` on the report's last line that has it, or -1.
long report_value(const std::string& report, const std::string& key) {
  long value = -1;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(key + " ", 0) == 0) value = std::atol(line.c_str() + key.size() + 1);
  return value;
}

std::string report_setup_error(const std::string& report) {
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("setup ", 0) == 0) return line.substr(6);
  return "";
}

// Kills the launcher, its group and the job's session (namespaces: the job dies with the launcher
// anyway, and everything it started with it).
void kill_job(Running& r, SandboxEnd why) {
  if (r.killed) return;
  r.killed = true;
  r.outcome.end = why;
  // The job's group only while the launcher has not reaped it (after that its pid may be reused).
  const long job = report_value(r.report, "pid");
  const bool reaped = report_value(r.report, "exit") >= 0 || report_value(r.report, "signal") >= 0;
  if (job > 1 && !reaped) ::kill(-pid_t(job), SIGKILL);
  ::kill(-r.launcher, SIGKILL);
  ::kill(r.launcher, SIGKILL);
}

// Appends what `fd` has now (non-blocking); false at end of file or on an error.
bool read_some(int fd, std::string& into, std::size_t cap) {
  char chunk[65536];
  while (into.size() <= cap) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      into.append(chunk, std::size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

// Reads stdout or stderr; past output_kb in all, the job ends as output_limit with what fits kept.
void read_output(Running& r, int& fd, std::string& into, const SandboxOptions& o) {
  const std::size_t cap = std::size_t(o.limits.output_kb) << 10;
  const bool open = read_some(fd, into, cap);
  const std::size_t total = r.outcome.out.size() + r.outcome.err.size();
  if (total > cap) {
    into.resize(into.size() - std::min(into.size(), total - cap));
    kill_job(r, SandboxEnd::output_limit);
  }
  if (!open || total > cap) close_fd(fd);  // past the limit nothing more is read
}

void write_input(Running& r, const std::string& data) {
  while (r.written < data.size()) {
    const ssize_t n = ::write(r.in, data.data() + r.written, std::min<std::size_t>(data.size() - r.written, 1 << 16));
    if (n > 0) {
      r.written += std::size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // EPIPE: the job stopped reading
  }
  close_fd(r.in);
}

}  // namespace

// Depth-first with two descriptors at most, so no depth is too deep: each pass over the current
// folder unlinks what it can and descends into the first folder that will not go; an emptied folder
// goes back up through "..", which must be the very folder it came down from (its device and inode,
// kept per level): a folder moved away by a process still running cannot lead the removal outside.
void remove_tree(const std::string& path) {
  if (::unlinkat(AT_FDCWD, path.c_str(), 0) == 0) return;  // a file or a link where the folder was
  int cur = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (cur < 0) return;
  std::vector<std::pair<dev_t, ino_t>> above;  // the folders above `cur`, from the top
  std::vector<std::string> names;              // the name of each folder below the top, down to `cur`
  std::string emptied;                         // the folder just come up from: if it will not go now, nothing will
  const auto identity = [](int fd) {
    struct stat st {};
    ::fstat(fd, &st);
    return std::pair<dev_t, ino_t>(st.st_dev, st.st_ino);
  };
  ::fchmod(cur, 0700);  // a job may have made it read-only
  bool stuck = false;
  while (!stuck) {
    std::string deeper;
    if (DIR* d = ::fdopendir(::dup(cur))) {
      ::rewinddir(d);
      while (const dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
        if (::unlinkat(cur, e->d_name, 0) == 0 || ::unlinkat(cur, e->d_name, AT_REMOVEDIR) == 0) continue;
        deeper = e->d_name;         // a folder with something in it
        stuck = deeper == emptied;  // emptied and still here (a mount point): give up
        break;
      }
      ::closedir(d);
    }
    emptied.clear();
    if (stuck) break;
    if (!deeper.empty()) {
      // Made listable through a descriptor of the folder itself (never through its name, which a
      // running process could swap for a link), then opened.
      const int folder = ::openat(cur, deeper.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (folder < 0) break;  // not a folder after all, and it would not go: give up
      const std::string self = "/proc/self/fd/" + std::to_string(folder);
      ::chmod(self.c_str(), 0700);
      const int down = ::open(self.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      ::close(folder);
      if (down < 0) break;
      above.push_back(identity(cur));
      names.push_back(deeper);
      ::close(cur);
      cur = down;
      continue;
    }
    if (above.empty()) break;  // the top folder is empty
    const int up = ::openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ::close(cur);
    cur = up;
    if (cur < 0 || identity(cur) != above.back()) break;  // moved under us: stop here
    above.pop_back();
    emptied = names.back();
    names.pop_back();
  }
  if (cur >= 0) ::close(cur);
  ::rmdir(path.c_str());
}

namespace {

// Reaps the launcher (its status fd closed: it has exited or is exiting) and turns its report
// into the outcome.
void finish_job(Running& r, const SandboxOptions& options) {
  // What is still in the pipes, read while the launcher is a zombie (its pid not yet reusable, so a
  // kill for output is harmless).
  if (r.out >= 0) read_output(r, r.out, r.outcome.out, options);
  if (r.err >= 0) read_output(r, r.err, r.outcome.err, options);
  int wstatus = 0;
  pid_t reaped = -1;
  while ((reaped = ::waitpid(r.launcher, &wstatus, 0)) < 0 && errno == EINTR) {
  }
  r.outcome.wall_s = std::chrono::duration<double>(Clock::now() - r.start).count();
  for (int* fd : {&r.in, &r.out, &r.err, &r.status}) close_fd(*fd);
  remove_tree(r.dir);
  SandboxOutcome& o = r.outcome;
  if (r.killed) return;  // timed_out / output_limit, set by kill_job
  const std::string setup = report_setup_error(r.report);
  const long signal = report_value(r.report, "signal"), code = report_value(r.report, "exit");
  if (!setup.empty()) {
    o.end = SandboxEnd::failed;
    o.err = "unstuck-sandbox: " + setup;
  } else if (signal > 0) {
    o.end = SandboxEnd::signaled;
    o.signal = int(signal);
  } else if (code >= 0) {
    o.end = SandboxEnd::exited;
    o.exit_code = int(code);
  } else if (reaped == r.launcher && WIFSIGNALED(wstatus)) {  // the job killed its launcher (no namespaces)
    o.end = SandboxEnd::signaled;
    o.signal = WTERMSIG(wstatus);
  } else {
    o.end = SandboxEnd::failed;
    const std::string how =
        reaped == r.launcher ? "exited with status " + std::to_string(WEXITSTATUS(wstatus)) : "ended";
    o.err = "sandbox: the launcher " + how + " without a report: " + o.err;
  }
}

// Blocks SIGPIPE in this thread while it writes to jobs' stdin, and swallows the ones that came.
class QuietSigpipe {
 public:
  QuietSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~QuietSigpipe() {
    const timespec now{0, 0};
    if (!was_pending_)
      while (::sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
      }
    ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  QuietSigpipe(const QuietSigpipe&) = delete;
  QuietSigpipe& operator=(const QuietSigpipe&) = delete;

 private:
  sigset_t pipe_{}, saved_{};
  bool was_pending_ = false;
};

// One poll over every running job: feeds stdin, reads stdout, stderr and the report, and kills the
// jobs past their wall time.
void serve(std::vector<Running>& running, const std::vector<SandboxJob>& jobs, const SandboxOptions& options) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Running*, int*>> owner;  // fds[i] is *owner[i].second of *owner[i].first
  Clock::time_point first = Clock::time_point::max();
  for (Running& r : running) {
    for (int* fd : {&r.in, &r.out, &r.err, &r.status}) {
      if (*fd < 0) continue;
      fds.push_back({*fd, short(fd == &r.in ? POLLOUT : POLLIN), 0});
      owner.emplace_back(&r, fd);
    }
    if (!r.killed) first = std::min(first, r.deadline);
  }
  const double left =
      first == Clock::time_point::max() ? 1.0 : std::chrono::duration<double>(first - Clock::now()).count();
  ::poll(fds.data(), nfds_t(fds.size()), left <= 0 ? 0 : int(std::min(left, 1.0) * 1000.0) + 1);
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Running& r = *owner[i].first;
    int* fd = owner[i].second;
    if (fd == &r.in)
      write_input(r, jobs[r.index].stdin_data);
    else if (fd == &r.out)
      read_output(r, r.out, r.outcome.out, options);
    else if (fd == &r.err)
      read_output(r, r.err, r.outcome.err, options);
    else if (!read_some(r.status, r.report, 1 << 16))
      close_fd(r.status);
  }
  for (Running& r : running)
    if (!r.killed && Clock::now() >= r.deadline) kill_job(r, SandboxEnd::timed_out);
}

}  // namespace

std::string SandboxCapabilities::describe() const {
  std::string have;
  if (namespaces) have = "user/PID/network/mount namespaces, a private root";
  if (landlock_abi > 0)
    have += (have.empty() ? "" : ", ") + std::string("Landlock ABI ") + std::to_string(landlock_abi);
  std::string line = "sandbox: " + (have.empty() ? std::string("resource limits only") : have);
  if (!missing.empty()) line += "; missing " + missing;
  if (::geteuid() == 0) line += "; programs run as nobody (uid 65534)";
  return line;
}

SandboxCapabilities sandbox_capabilities() {
  static const SandboxCapabilities caps = probe_capabilities();
  return caps;
}

std::string sandbox_launcher_path() {
  if (const char* env = std::getenv("UNSTUCK_SANDBOX"); env && *env) {
    if (::access(env, X_OK) != 0)
      throw UserError(std::string("UNSTUCK_SANDBOX=") + env + ": not an executable file (" + std::strerror(errno) +
                      ")");
    return env;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const std::string beside = ec ? std::string() : (self.parent_path() / "unstuck-sandbox").string();
  if (!beside.empty() && ::access(beside.c_str(), X_OK) == 0) return beside;
  const std::string built = UNSTUCK_SANDBOX_BUILD_PATH;
  if (!built.empty() && ::access(built.c_str(), X_OK) == 0) return built;
  std::string looked = "$UNSTUCK_SANDBOX";
  if (!beside.empty()) looked += ", " + beside;
  if (!built.empty()) looked += ", " + built;
  throw UserError("reward.code: cannot find the sandbox launcher unstuck-sandbox (looked at " + looked +
                  "); build the unstuck-sandbox target or set UNSTUCK_SANDBOX to its path");
}

std::vector<SandboxOutcome> run_sandboxed(const std::vector<SandboxJob>& jobs, const SandboxOptions& options) {
  const SandboxCapabilities caps = sandbox_capabilities();
  if (options.require_isolation && !caps.missing.empty())
    throw UserError("reward.code: the sandbox needs " + caps.missing +
                    " on this kernel; set reward.code.require_isolation: false to run with resource limits only");
  const std::string launcher = sandbox_launcher_path();
  std::vector<SandboxOutcome> outcomes(jobs.size());
  const std::size_t parallel = std::size_t(std::max(options.parallel, 1));
  QuietSigpipe quiet;
  std::vector<Running> running;
  std::size_t next = 0;
  while (next < jobs.size() || !running.empty()) {
    while (running.size() < parallel && next < jobs.size()) {
      Running r;
      r.index = next++;
      if (start_job(r, jobs[r.index], launcher, options, caps)) {
        running.push_back(std::move(r));
      } else {
        for (int* fd : {&r.in, &r.out, &r.err, &r.status}) close_fd(*fd);
        if (!r.dir.empty()) remove_tree(r.dir);
        outcomes[r.index] = std::move(r.outcome);
      }
    }
    if (running.empty()) continue;
    serve(running, jobs, options);
    for (auto it = running.begin(); it != running.end();) {
      if (it->status >= 0) {
        ++it;
        continue;
      }
      finish_job(*it, options);
      outcomes[it->index] = std::move(it->outcome);
      it = running.erase(it);
    }
  }
  return outcomes;
}

}  // namespace unstuck::reward
