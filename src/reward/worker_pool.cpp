// Reward workers over Unix socket pairs: each worker is the one child of a small init that is PID 1
// of a PID namespace of its own (with a user namespace when not root), so that whatever the worker
// starts (setsid, double forks, daemons) dies with it, and the init dies with the trainer, even by
// SIGKILL or the OOM killer. The socket is the worker's stdin and stdout; an address-space limit;
// requests written and answers read without blocking, against each request's deadline. Sockets, not
// pipes, so a write to a dead worker is an error (MSG_NOSIGNAL), never a SIGPIPE to the trainer.
#include "unstuck/reward/worker_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <thread>
#include <utility>

#include "unstuck/common/error.h"

namespace unstuck::reward {
namespace {

using Clock = std::chrono::steady_clock;

// A worker's answer line longer than this is refused (a runaway print, not a result).
constexpr std::size_t kMaxLine = std::size_t(64) << 20;
// Starts in a row that failed on every worker before waiting batches score the failure.
constexpr int kGiveUpStarts = 3;

double seconds_until(Clock::time_point t) { return std::chrono::duration<double>(t - Clock::now()).count(); }

Clock::time_point after(double seconds) { return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6)); }

// "exited with status 3", "was killed by signal 9 (Killed)". An init passes its worker's death by
// signal N on as the exit status 128 + N (PID 1 of a namespace cannot kill itself with a signal).
std::string exit_text(int status, bool through_init) {
  const auto killed = [](int sig) {
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  };
  if (WIFEXITED(status) && through_init && WEXITSTATUS(status) > 128) return killed(WEXITSTATUS(status) - 128);
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return killed(WTERMSIG(status));
  return "stopped";
}

// What the child of clone() needs; built before it, since the child of a multi-threaded process may
// make async-signal-safe calls only.
struct Spawn {
  char** argv;
  int sock;                       // the worker's end of the socket pair
  int pool_end;                   // the pool's end, closed in the child
  int64_t memory_mb;              // RLIMIT_AS, 0 = none
  const char* uid_map = nullptr;  // with a user namespace: this user mapped to itself
  const char* gid_map = nullptr;
};

bool put(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  const ssize_t n = fd < 0 ? -1 : ::write(fd, text, std::strlen(text));
  if (fd >= 0) ::close(fd);
  return n == ssize_t(std::strlen(text));
}

// True while the pool holds its end of the socket (it closes it only by stopping the worker or dying).
bool pool_alive(int sock) {
  char c;
  return ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
}

[[noreturn]] void exec_worker(const Spawn& s) {
  if (s.memory_mb > 0) {
    const rlim_t bytes = rlim_t(s.memory_mb) << 20;
    const struct rlimit lim { bytes, bytes };
    ::setrlimit(RLIMIT_AS, &lim);
  }
  ::dup2(s.sock, 0);
  ::dup2(s.sock, 1);
  ::execvp(s.argv[0], s.argv);
  static const char msg[] = "{\"fatal\": \"cannot execute the worker command\"}\n";
  (void)!::write(1, msg, sizeof msg - 1);
  ::_exit(127);
}

// PID 1 of the worker's namespace: starts the worker, reaps whatever is orphaned to it, and exits
// with the worker's status; its exit ends every process left in the namespace.
int worker_init(void* arg) {
  const Spawn& s = *static_cast<const Spawn*>(arg);
  ::close(s.pool_end);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (!pool_alive(s.sock)) ::_exit(127);  // the trainer died before prctl
  if (s.uid_map && !(put("/proc/self/setgroups", "deny") || errno == ENOENT)) ::_exit(126);
  if (s.uid_map && (!put("/proc/self/uid_map", s.uid_map) || !put("/proc/self/gid_map", s.gid_map))) ::_exit(126);
  ::setpgid(0, 0);
  const pid_t worker = pid_t(::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr));  // a fork
  if (worker == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    exec_worker(s);
  }
  ::close(s.sock);
  if (worker < 0) ::_exit(127);
  for (;;) {
    int status = 0;
    const pid_t ended = ::waitpid(-1, &status, 0);
    if (ended == worker) ::_exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
    if (ended < 0 && errno != EINTR) ::_exit(127);
  }
}

// Starts the worker's init in new namespaces; -1 with errno when the kernel refuses them.
pid_t spawn_contained(Spawn& s) {
  static const std::string uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
  static const std::string gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  int flags = CLONE_NEWPID | SIGCHLD;
  if (::geteuid() != 0) {  // root makes a PID namespace directly; anyone else inside a user namespace
    flags |= CLONE_NEWUSER;
    s.uid_map = uid_map.c_str();
    s.gid_map = gid_map.c_str();
  }
  constexpr std::size_t kStack = std::size_t(256) << 10;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  const pid_t pid = ::clone(worker_init, static_cast<char*>(stack) + kStack, flags, &s);
  const int saved = errno;
  ::munmap(stack, kStack);  // the child has its own copy of the address space
  errno = saved;
  return pid;
}

// The old way, where the kernel gives no namespaces: a process group of its own, killed whole
// (descendants that call setsid escape it).
pid_t spawn_plain(const Spawn& s) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: async-signal-safe calls only, then exec
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    exec_worker(s);
  }
  return pid;
}

// Reads what is there (non-blocking). False at end of file or on an error.
bool receive(int fd, std::string& buffer) {
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      buffer.append(chunk, std::size_t(n));
      if (buffer.size() > kMaxLine) return true;  // the caller refuses it
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

// Takes one complete line off `buffer` into `line`.
bool take_line(std::string& buffer, std::string& line) {
  const std::size_t nl = buffer.find('\n');
  if (nl == std::string::npos) return false;
  line = buffer.substr(0, nl);
  buffer.erase(0, nl + 1);
  return true;
}

WorkerResult failed(const std::string& why) {
  WorkerResult r;
  r.error = why;
  return r;
}

}  // namespace

WorkerResult worker_item_result(const nlohmann::json& r) {
  if (!r.is_object()) return failed("bad response: a result is not an object");
  if (r.contains("error")) return failed(r["error"].is_string() ? r["error"].get<std::string>() : r["error"].dump());
  WorkerResult out;
  if (r.contains("metrics") && r["metrics"].is_object())  // {"name": [numbers]}
    for (const auto& [k, values] : r["metrics"].items())
      for (const auto& v : values.is_array() ? values : nlohmann::json::array({values}))
        if (v.is_number() && std::isfinite(v.get<double>())) out.metrics[k].push_back(v.get<double>());
  if (r.contains("columns") && r["columns"].is_object()) out.columns = r["columns"];
  if (r.contains("value")) {
    out.ok = true;
    out.value = r["value"];
    return out;
  }
  if (r.contains("none") && r["none"] == true) {
    out.ok = out.none = true;
    return out;
  }
  if (!r.contains("score") || !r["score"].is_number()) return failed("bad response: a result without a numeric score");
  out.score = r["score"].get<double>();
  if (!std::isfinite(out.score)) return failed("the score is not finite");
  // Rewards are float32 in the trainer: a larger finite score would become inf there.
  if (std::fabs(out.score) > double(std::numeric_limits<float>::max()))
    return failed("the score " + r["score"].dump() + " is outside float32's range (|score| <= 3.4e38)");
  out.ok = true;
  if (r.contains("extra") && r["extra"].is_object())
    for (const auto& [k, v] : r["extra"].items())
      if (v.is_boolean() || (v.is_number() && std::isfinite(v.get<double>())))
        out.extra[k] = v.is_boolean() ? double(v.get<bool>()) : v.get<double>();
  return out;
}

WorkerPool::WorkerPool(WorkerOptions options) : options_(std::move(options)) {
  if (options_.argv.empty()) throw UserError(options_.name + ": no worker command");
  if (options_.workers < 1) throw UserError(options_.name + ": workers must be >= 1");
  workers_.resize(std::size_t(options_.workers));
  try {
    for (Worker& w : workers_) start_blocking(w);
  } catch (...) {
    for (Worker& w : workers_) stop(w);
    throw;
  }
}

WorkerPool::~WorkerPool() {
  for (Worker& w : workers_) stop(w);
}

void WorkerPool::spawn(Worker& w) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return down(w, std::string("cannot create a socket for a worker: ") + std::strerror(errno));
  std::vector<char*> argv;
  for (const std::string& a : options_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  Spawn spawn{argv.data(), sv[1], sv[0], options_.memory_mb};
  pid_t pid = spawn_contained(spawn);
  w.through_init = pid > 0;
  if (pid < 0) {
    static bool said = false;  // once per process: the same kernel refuses every worker alike
    if (!std::exchange(said, true))
      spdlog::warn(
          "{}: no PID namespace for reward workers ({}): processes a reward function starts with setsid "
          "or a double fork can outlive it",
          options_.name, std::strerror(errno));
    pid = spawn_plain(spawn);
  }
  ::close(sv[1]);
  if (pid < 0) {
    ::close(sv[0]);
    return down(w, std::string("cannot start a worker: fork: ") + std::strerror(errno));
  }
  w.pid = pid;
  w.fd = sv[0];
  w.buffer.clear();
  w.state = State::starting;
  w.start_deadline = after(options_.start_timeout_s);
}

void WorkerPool::check_start(Worker& w) {
  if (w.state != State::starting) return;
  const bool open = receive(w.fd, w.buffer);
  std::string line;
  if (take_line(w.buffer, line)) {
    const nlohmann::json hello = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (hello.is_object() && hello.value("ready", false)) {
      w.state = State::ready;
      w.failed_starts = 0;
      return;
    }
    down(w, "the worker did not start: " + (hello.is_object() && hello.contains("fatal") && hello["fatal"].is_string()
                                                ? hello["fatal"].get<std::string>()
                                                : "its first line is not {\"ready\": true}: " + line.substr(0, 200)));
    return;
  }
  if (!open) {
    int status = 0;
    ::waitpid(w.pid, &status, 0);
    w.pid = -1;
    down(w, "the worker " + exit_text(status, w.through_init) + " before it was ready (its messages are above)");
    return;
  }
  if (seconds_until(w.start_deadline) <= 0) {
    down(w, "the worker was not ready within " + std::to_string(int(std::lround(options_.start_timeout_s))) +
                " s (raise reward.function.start_timeout_s, or a term's function.start_timeout_s)");
  }
}

void WorkerPool::start_blocking(Worker& w) {
  spawn(w);
  while (w.state == State::starting) {
    pollfd p{w.fd, POLLIN, 0};
    ::poll(&p, 1, int(std::clamp(seconds_until(w.start_deadline) * 1000.0, 0.0, 1000.0)) + 1);
    check_start(w);
  }
  if (w.state != State::ready) throw UserError(options_.name + ": " + w.why_down);
}

void WorkerPool::stop(Worker& w) {
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  if (w.pid > 0) {
    ::kill(-w.pid, SIGKILL);  // the whole group: whatever the function started dies with it
    ::kill(w.pid, SIGKILL);
    int status = 0;
    ::waitpid(w.pid, &status, 0);
  }
  w.pid = -1;
  w.buffer.clear();
  w.state = State::down;
}

void WorkerPool::restart(Worker& w) {
  stop(w);
  ++restarts_;
  spawn(w);
}

// A start that failed: retried after 0.5, 1, 2 ... 30 s.
void WorkerPool::down(Worker& w, const std::string& why) {
  stop(w);
  ++w.failed_starts;
  w.why_down = why;
  const double wait = std::min(30.0, 0.5 * double(1 << std::min(w.failed_starts - 1, 6)));
  w.retry_at = after(wait);
  spdlog::warn("{}: {} (trying again in {:.1f} s)", options_.name, why, wait);
}

// One run(): batches go to ready workers in order, each request with its own deadline; answers,
// deaths and timeouts are read as they come, without one worker's trouble holding up another's.
class WorkerPool::Round {
 public:
  Round(WorkerPool& pool, const std::vector<nlohmann::json>& batches, const nlohmann::json& state,
        const std::vector<int64_t>& pinned)
      : pool_(pool),
        batches_(batches),
        state_(state),
        pinned_(pinned),
        out_(batches.size()),
        busy_(pool.workers_.size()) {
    for (std::size_t b = 0; b < batches.size(); ++b) queue_.push_back(b);
  }

  std::vector<std::vector<WorkerResult>> run(const std::atomic<bool>* cancel) {
    while (done_ < batches_.size()) {
      if (cancel && cancel->load()) {  // the user stops the run: a hung function is not waited for
        for (std::size_t k = 0; k < busy_.size(); ++k)
          if (busy_[k].active) pool_.stop(pool_.workers_[k]);  // down: a later run() starts it again
        throw Interrupted(pool_.options_.name + ": scoring given up, the run was asked to stop");
      }
      for (Worker& w : pool_.workers_)  // back-off over: start again, beside the others' scoring
        if (w.state == State::down && seconds_until(w.retry_at) <= 0) pool_.spawn(w);
      if (hopeless()) continue;
      assign();
      poll(cancel ? std::chrono::milliseconds(250) : std::chrono::milliseconds(1000));
    }
    return std::move(out_);
  }

 private:
  struct Busy {
    std::size_t batch = 0;
    int64_t id = 0;
    std::string pending;  // request bytes not yet sent
    Clock::time_point deadline;
    bool active = false;
  };

  void fail_batch(std::size_t k, const std::string& why, bool restart_worker) {
    Busy& s = busy_[k];
    out_[s.batch].assign(batches_[s.batch].size(), failed(why));
    s.active = false;
    ++done_;
    if (restart_worker) pool_.restart(pool_.workers_[k]);
  }

  // No worker can score and each has failed to start kGiveUpStarts times in a row: the waiting
  // batches fail with the reason (reward_error; the run decides by max_error_frac).
  bool hopeless() {
    const bool none = std::all_of(pool_.workers_.begin(), pool_.workers_.end(), [](const Worker& w) {
      return w.state == State::down && w.failed_starts >= kGiveUpStarts;
    });
    if (!none) return false;
    for (; !queue_.empty(); queue_.pop_front(), ++done_)
      out_[queue_.front()].assign(batches_[queue_.front()].size(),
                                  failed("the worker could not be started again: " + pool_.workers_[0].why_down));
    return true;
  }

  // The worker batch b must go to (pinned), or -1.
  int64_t worker_of(std::size_t b) const {
    if (pinned_.empty() || pinned_[b] < 0) return -1;
    return pinned_[b] % int64_t(busy_.size());
  }

  // Pinned batches whose worker has given up starting fail with its reason.
  void fail_orphans() {
    for (auto it = queue_.begin(); it != queue_.end();) {
      const int64_t k = worker_of(*it);
      const Worker* w = k < 0 ? nullptr : &pool_.workers_[std::size_t(k)];
      if (w && w->state == State::down && w->failed_starts >= kGiveUpStarts) {
        out_[*it].assign(batches_[*it].size(), failed("its worker could not be started again: " + w->why_down));
        ++done_;
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The next waiting batches to the ready workers that are free (a pinned batch to its own).
  void assign() {
    if (!pinned_.empty()) fail_orphans();
    for (std::size_t k = 0; k < busy_.size() && !queue_.empty(); ++k) {
      if (busy_[k].active || pool_.workers_[k].state != State::ready) continue;
      const auto next = std::find_if(queue_.begin(), queue_.end(), [&](std::size_t b) {
        const int64_t w = worker_of(b);
        return w < 0 || w == int64_t(k);
      });
      if (next == queue_.end()) continue;
      Busy& s = busy_[k];
      s.batch = *next;
      queue_.erase(next);
      s.id = pool_.next_id_++;
      nlohmann::json request{{"id", s.id}, {"items", batches_[s.batch]}};
      if (!state_.is_null()) request["state"] = state_;
      s.pending = request.dump() + "\n";
      s.deadline = after(pool_.options_.timeout_s);  // this request's own limit, whatever the others do
      s.active = true;
    }
  }

  // Waits (at most `tick`, or to the next deadline or retry) for a worker to be writable, to answer
  // or to finish starting, and handles what came.
  void poll(std::chrono::milliseconds tick) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    Clock::time_point first = Clock::now() + tick;
    for (std::size_t k = 0; k < busy_.size(); ++k) {
      const Worker& w = pool_.workers_[k];
      if (busy_[k].active) {
        fds.push_back({w.fd, short(POLLIN | (busy_[k].pending.empty() ? 0 : POLLOUT)), 0});
        which.push_back(k);
        first = std::min(first, busy_[k].deadline);
      } else if (w.state == State::starting) {
        fds.push_back({w.fd, POLLIN, 0});
        which.push_back(k);
        first = std::min(first, w.start_deadline);
      } else if (w.state == State::down) {
        first = std::min(first, w.retry_at);
      }
    }
    const double left = seconds_until(first);
    ::poll(fds.data(), nfds_t(fds.size()), left <= 0 ? 0 : int(std::min(left * 1000.0, 1000.0)) + 1);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const std::size_t k = which[i];
      if (!busy_[k].active) {  // a worker starting: ready, failed, or still on its way
        pool_.check_start(pool_.workers_[k]);
        continue;
      }
      if (!exchange(k, fds[i].revents)) continue;
      if (busy_[k].active && seconds_until(busy_[k].deadline) <= 0)
        fail_batch(k,
                   "timed out after " + std::to_string(int(std::lround(pool_.options_.timeout_s))) +
                       " s (the worker was restarted)",
                   true);
    }
  }

  // Sends what is pending and reads what came: false when the batch was settled here (answered or
  // failed).
  bool exchange(std::size_t k, short revents) {
    Busy& s = busy_[k];
    Worker& w = pool_.workers_[k];
    if (revents & POLLOUT) {
      const ssize_t n = ::send(w.fd, s.pending.data(), s.pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) s.pending.erase(0, std::size_t(n));
    }
    if (!(revents & (POLLIN | POLLHUP | POLLERR))) return true;
    const bool open = receive(w.fd, w.buffer);
    std::string line;
    if (w.buffer.size() > kMaxLine) {
      fail_batch(k, "bad response: a line over 64 MiB", true);
      return false;
    }
    if (take_line(w.buffer, line)) {
      answer(k, line, open);
      return false;
    }
    if (!open) {
      int status = 0;
      ::waitpid(w.pid, &status, 0);
      w.pid = -1;
      fail_batch(k, "the worker " + exit_text(status, w.through_init) + " while scoring this batch", true);
      return false;
    }
    return true;
  }

  // A worker's answer line to batch k: its results, or its error, or a bad response.
  void answer(std::size_t k, const std::string& line, bool open) {
    Busy& s = busy_[k];
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (!r.is_object() || !r.contains("id") || r["id"] != s.id)
      return fail_batch(k, "bad response: not an answer to the request: " + line.substr(0, 200), true);
    if (r.contains("error"))
      return fail_batch(k, r["error"].is_string() ? r["error"].get<std::string>() : r["error"].dump(), false);
    const std::size_t n = batches_[s.batch].size();
    if (!r.contains("results") || !r["results"].is_array() || r["results"].size() != n) {
      const std::size_t got = r.contains("results") && r["results"].is_array() ? r["results"].size() : 0;
      return fail_batch(k, "bad response: " + std::to_string(got) + " results for " + std::to_string(n) + " items",
                        true);
    }
    std::vector<WorkerResult>& results = out_[s.batch];
    bool out_of_memory = false;
    for (const auto& item : r["results"]) {
      results.push_back(worker_item_result(item));
      out_of_memory = out_of_memory || results.back().error.find("MemoryError") != std::string::npos;
    }
    s.active = false;
    ++done_;
    // It answered, then died; or its function ran out of memory (a heap that large stays): a fresh
    // worker for the next batch.
    if (!open || out_of_memory) pool_.restart(pool_.workers_[k]);
  }

  WorkerPool& pool_;
  const std::vector<nlohmann::json>& batches_;
  const nlohmann::json& state_;
  const std::vector<int64_t>& pinned_;
  std::vector<std::vector<WorkerResult>> out_;
  std::vector<Busy> busy_;
  std::deque<std::size_t> queue_;
  std::size_t done_ = 0;
};

std::vector<std::vector<WorkerResult>> WorkerPool::run(const std::vector<nlohmann::json>& batches,
                                                       const nlohmann::json& state, const std::atomic<bool>* cancel,
                                                       const std::vector<int64_t>& pinned) {
  if (!pinned.empty() && pinned.size() != batches.size())
    throw std::logic_error("WorkerPool::run: one pinned worker per batch");
  return Round(*this, batches, state, pinned).run(cancel);
}

std::vector<std::string> python_reward_worker_argv(const std::string& python, const std::string& path,
                                                   const std::string& name, const std::string& style) {
  return {python, "-c", python_reward_worker_source(), "--path", path, "--name", name, "--style", style};
}

}  // namespace unstuck::reward
