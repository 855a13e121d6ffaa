// Reward workers over Unix socket pairs: fork/exec with the socket as stdin and stdout, a process
// group of its own (killed whole), an address-space limit, death with the parent; requests written
// and answers read without blocking, against each request's deadline. Sockets, not pipes, so a
// write to a dead worker is an error (MSG_NOSIGNAL), never a SIGPIPE to the trainer.
#include "unstuck/reward/worker_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <thread>

#include "unstuck/common/error.h"

namespace unstuck::reward {
namespace {

using Clock = std::chrono::steady_clock;

// A worker's answer line longer than this is refused (a runaway print, not a result).
constexpr std::size_t kMaxLine = std::size_t(64) << 20;

double seconds_until(Clock::time_point t) {
  return std::chrono::duration<double>(t - Clock::now()).count();
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

// "exited with status 3", "was killed by signal 9 (Killed)".
std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "stopped";
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
  if (!r.contains("score") || !r["score"].is_number()) return failed("bad response: a result without a numeric score");
  WorkerResult out;
  out.score = r["score"].get<double>();
  if (!std::isfinite(out.score)) return failed("the score is not finite");
  // Rewards are float32 in the trainer: a larger finite score would become inf there.
  if (std::fabs(out.score) > double(std::numeric_limits<float>::max()))
    return failed("the score " + r["score"].dump() + " is outside float32's range (|score| <= 3.4e38)");
  out.ok = true;
  if (r.contains("extra") && r["extra"].is_object())
    for (const auto& [k, v] : r["extra"].items())
      if (v.is_number() || v.is_boolean()) out.extra[k] = v.is_boolean() ? double(v.get<bool>()) : v.get<double>();
  return out;
}

WorkerPool::WorkerPool(WorkerOptions options) : options_(std::move(options)) {
  if (options_.argv.empty()) throw UserError(options_.name + ": no worker command");
  if (options_.workers < 1) throw UserError(options_.name + ": workers must be >= 1");
  workers_.resize(std::size_t(options_.workers));
  try {
    for (Worker& w : workers_) start(w);
  } catch (...) {
    for (Worker& w : workers_) stop(w);
    throw;
  }
}

WorkerPool::~WorkerPool() {
  for (Worker& w : workers_) stop(w);
}

void WorkerPool::start(Worker& w) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw UserError(options_.name + ": cannot create a socket for a worker: " + std::strerror(errno));
  std::vector<char*> argv;
  for (const std::string& a : options_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    throw UserError(options_.name + ": cannot start a worker: fork: " + std::strerror(errno));
  }
  if (pid == 0) {  // the child: async-signal-safe calls only, then exec
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    if (options_.memory_mb > 0) {
      const rlim_t bytes = rlim_t(options_.memory_mb) << 20;
      const struct rlimit lim{bytes, bytes};
      ::setrlimit(RLIMIT_AS, &lim);
    }
    ::dup2(sv[1], 0);
    ::dup2(sv[1], 1);
    ::execvp(argv[0], argv.data());
    static const char msg[] = "{\"fatal\": \"cannot execute the worker command\"}\n";
    (void)!::write(1, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(sv[1]);
  w.pid = pid;
  w.fd = sv[0];
  w.buffer.clear();
  // The ready line, or the reason it will not come.
  const Clock::time_point deadline = after(options_.start_timeout_s);
  std::string line;
  for (;;) {
    if (take_line(w.buffer, line)) {
      nlohmann::json hello = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (hello.is_object() && hello.value("ready", false)) return;
      const std::string why = hello.is_object() && hello.contains("fatal") && hello["fatal"].is_string()
                                  ? hello["fatal"].get<std::string>()
                                  : "its first line is not {\"ready\": true}: " + line.substr(0, 200);
      stop(w);
      throw UserError(options_.name + ": the worker did not start: " + why);
    }
    const double left = seconds_until(deadline);
    if (left <= 0) {
      stop(w);
      throw UserError(options_.name + ": the worker was not ready within " + std::to_string(int(options_.start_timeout_s)) +
                      " s (worker.start_timeout_s)");
    }
    pollfd p{w.fd, POLLIN, 0};
    ::poll(&p, 1, int(std::min(left * 1000.0, 1000.0)) + 1);
    if (!receive(w.fd, w.buffer) && w.buffer.find('\n') == std::string::npos) {
      int status = 0;
      ::waitpid(w.pid, &status, 0);
      w.pid = -1;
      stop(w);
      throw UserError(options_.name + ": the worker " + exit_text(status) + " before it was ready (its messages are above)");
    }
  }
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
}

void WorkerPool::restart(Worker& w) {
  stop(w);
  ++restarts_;
  start(w);
}

std::vector<std::vector<WorkerResult>> WorkerPool::run(const std::vector<nlohmann::json>& batches) {
  std::vector<std::vector<WorkerResult>> out(batches.size());
  struct Busy {
    std::size_t batch = 0;
    int64_t id = 0;
    std::string pending;  // request bytes not yet sent
    Clock::time_point deadline;
    bool active = false;
  };
  std::vector<Busy> busy(workers_.size());
  std::deque<std::size_t> queue;
  for (std::size_t b = 0; b < batches.size(); ++b) queue.push_back(b);
  std::size_t done = 0;
  const auto fail_batch = [&](std::size_t k, const std::string& why, bool restart_worker) {
    Busy& s = busy[k];
    const std::size_t n = batches[s.batch].size();
    out[s.batch].assign(n, failed(why));
    s.active = false;
    ++done;
    if (restart_worker) restart(workers_[k]);
  };
  while (done < batches.size()) {
    for (std::size_t k = 0; k < workers_.size() && !queue.empty(); ++k) {
      if (busy[k].active) continue;
      Busy& s = busy[k];
      s.batch = queue.front();
      queue.pop_front();
      s.id = next_id_++;
      s.pending = nlohmann::json{{"id", s.id}, {"items", batches[s.batch]}}.dump() + "\n";
      s.deadline = after(options_.timeout_s);
      s.active = true;
    }
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    Clock::time_point first = Clock::time_point::max();
    for (std::size_t k = 0; k < workers_.size(); ++k) {
      if (!busy[k].active) continue;
      fds.push_back({workers_[k].fd, short(POLLIN | (busy[k].pending.empty() ? 0 : POLLOUT)), 0});
      which.push_back(k);
      first = std::min(first, busy[k].deadline);
    }
    const double left = seconds_until(first);
    ::poll(fds.data(), nfds_t(fds.size()), left <= 0 ? 0 : int(std::min(left * 1000.0, 1000.0)) + 1);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const std::size_t k = which[i];
      Busy& s = busy[k];
      Worker& w = workers_[k];
      if (fds[i].revents & POLLOUT) {
        const ssize_t n = ::send(w.fd, s.pending.data(), s.pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) s.pending.erase(0, std::size_t(n));
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        const bool open = receive(w.fd, w.buffer);
        std::string line;
        if (w.buffer.size() > kMaxLine) {
          fail_batch(k, "bad response: a line over 64 MiB", true);
          continue;
        }
        if (take_line(w.buffer, line)) {
          const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
          if (!r.is_object() || !r.contains("id") || r["id"] != s.id) {
            fail_batch(k, "bad response: not an answer to the request: " + line.substr(0, 200), true);
            continue;
          }
          if (r.contains("error")) {
            fail_batch(k, r["error"].is_string() ? r["error"].get<std::string>() : r["error"].dump(), false);
            continue;
          }
          const std::size_t n = batches[s.batch].size();
          if (!r.contains("results") || !r["results"].is_array() || r["results"].size() != n) {
            fail_batch(k, "bad response: " + std::to_string(r.contains("results") && r["results"].is_array() ? r["results"].size() : 0) +
                              " results for " + std::to_string(n) + " items", true);
            continue;
          }
          std::vector<WorkerResult>& results = out[s.batch];
          for (const auto& item : r["results"]) results.push_back(worker_item_result(item));
          s.active = false;
          ++done;
          if (!open) restart(w);  // it answered, then died: ready for the next batch again
          continue;
        }
        if (!open) {
          int status = 0;
          ::waitpid(w.pid, &status, 0);
          w.pid = -1;
          fail_batch(k, "the worker " + exit_text(status) + " while scoring this batch", true);
          continue;
        }
      }
      if (s.active && seconds_until(s.deadline) <= 0)
        fail_batch(k, "timed out after " + std::to_string(int(std::lround(options_.timeout_s))) + " s (the worker was restarted)",
                   true);
    }
  }
  return out;
}

std::vector<std::string> python_reward_worker_argv(const std::string& python, const std::string& path,
                                                   const std::string& name, const std::string& style) {
  return {python, "-c", python_reward_worker_source(), "--path", path, "--name", name, "--style", style};
}

}  // namespace unstuck::reward
