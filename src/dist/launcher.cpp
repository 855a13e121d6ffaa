// Local launcher: fork/exec one process per rank with the torchrun environment, poll their exits,
// forward stop signals, and tear the run down when a rank fails.
#include "unstuck/dist/launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "unstuck/common/error.h"
#include "unstuck/common/value_names.h"

extern char** environ;

namespace unstuck::dist {
namespace {

std::atomic<int> g_forward_signal{0};  // a signal handler can only reach static storage
extern "C" void remember_signal(int sig) { g_forward_signal = sig; }

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// The environment of one rank: ours, minus the variables we set, plus those.
std::vector<std::string> rank_environment(const LaunchOptions& o, int local, int port) {
  std::map<std::string, std::string> set = o.env;
  set["RANK"] = std::to_string(o.node_rank * o.nproc + local);
  set["WORLD_SIZE"] = std::to_string(o.nnodes * o.nproc);
  set["LOCAL_RANK"] = std::to_string(local);
  set["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
  set["MASTER_ADDR"] = o.master_addr;
  set["MASTER_PORT"] = std::to_string(port);
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!set.count(kv.substr(0, kv.find('=')))) out.push_back(kv);
  }
  for (const auto& [k, v] : set) out.push_back(k + "=" + v);
  return out;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  e.push_back(nullptr);
  const pid_t parent = ::getpid();
  // SIGINT and SIGTERM are blocked across the fork: the child inherits the launcher's handlers,
  // which would swallow a signal sent to it before execve (a peer's death makes the launcher
  // SIGTERM a rank that may still be starting). The child restores the default actions, then
  // unblocks: a signal sent in between is pending and acts on it then.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    // Own process group: a Ctrl-C at the terminal (or `timeout`, which signals its whole group)
    // reaches only the launcher, which forwards it once; a second SIGINT could arrive after the
    // rank has restored the default handler and kill it.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
    if (::getppid() != parent) ::_exit(127);
    ::execve(a[0], a.data(), e.data());
    ::_exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) throw std::runtime_error(std::string("launch: fork failed: ") + std::strerror(errno));
  return pid;
}

}  // namespace

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("launch: no free TCP port on the loopback interface");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

int launch_local(const LaunchOptions& o, std::ostream& log) {
  if (o.command.empty()) throw UserError("launch: give the command to run after --, e.g. -- train --config C");
  if (o.nproc < 1) throw UserError("launch: --nproc must be >= 1, got " + std::to_string(o.nproc));
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw UserError("launch: --node-rank must be in [0, --nnodes)");
  if (o.nnodes > 1 && o.master_port == 0)
    throw UserError("launch: with --nnodes > 1 give --master-port (the same on every node)");
  const int port = o.master_port ? o.master_port : free_tcp_port();
  // Handlers before the children exist, so no signal is lost in between; restored on return.
  g_forward_signal = 0;
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = remember_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::vector<pid_t> pids(std::size_t(o.nproc), 0);
  std::vector<bool> running(pids.size(), false);
  std::vector<int> stopped_by(pids.size(), 0);  // signal that froze a rank (SIGSTOP, SIGTSTP, ...); 0 = not frozen
  for (int i = 0; i < o.nproc; ++i) {
    pids[std::size_t(i)] = spawn(o.command, rank_environment(o, i, port));
    running[std::size_t(i)] = true;
  }
  const auto signal_all = [&](int sig) {
    for (std::size_t i = 0; i < pids.size(); ++i)
      if (running[i]) ::kill(pids[i], stopped_by[i] ? SIGKILL : sig);  // a frozen rank cannot act on SIGTERM
  };
  const auto rank_of = [&](std::size_t i) { return o.node_rank * o.nproc + int(i); };
  // " (rank 1, pid 123, is frozen: stopped by signal 19 (Stopped (signal)))" when a rank is frozen:
  // the likely reason its peers timed out.
  const auto frozen_ranks = [&] {
    std::string out;
    for (std::size_t i = 0; i < pids.size(); ++i)
      if (running[i] && stopped_by[i])
        out += "; rank " + std::to_string(rank_of(i)) + " (pid " + std::to_string(pids[i]) +
               ") is frozen (stopped by signal " + std::to_string(stopped_by[i]) + ", " + strsignal(stopped_by[i]) +
               "), the likely cause";
    return out;
  };
  int result = 0, live = o.nproc;
  std::chrono::steady_clock::time_point kill_at{};
  bool stopping = false;
  while (live > 0) {
    if (const int sig = g_forward_signal.exchange(0)) signal_all(sig);
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid > 0) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid || !running[i]) continue;
        if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
          stopped_by[i] = WIFSTOPPED(status) ? WSTOPSIG(status) : 0;
          if (stopped_by[i]) {
            log << "launch: rank " << rank_of(i) << " (pid " << pid << ") was stopped by signal " << stopped_by[i]
                << " (" << strsignal(stopped_by[i]) << "); its peers will time out unless it continues" << std::endl;
            if (stopping) ::kill(pid, SIGKILL);
          }
          continue;
        }
        running[i] = false;
        --live;
        const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        if (failed && !stopping) {
          log << "launch: rank " << rank_of(i) << " (pid " << pid << ") " << describe(status) << frozen_ranks()
              << (live > 0 ? "; stopping the other ranks" : "") << std::endl;
          result = exit_code(status);
          stopping = true;
          signal_all(SIGTERM);
          kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(o.grace_s * 1000));
        } else if (stopping && WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM) {
          // Not the stop it was sent: killed after the grace period, or by something else.
          const bool ours = WTERMSIG(status) == SIGKILL && kill_at == std::chrono::steady_clock::time_point::max();
          log << "launch: rank " << rank_of(i) << " (pid " << pid << ") " << describe(status)
              << (ours ? " (it did not stop within the grace period of " + format_double(o.grace_s) + " s)" : "")
              << std::endl;
        }
      }
      continue;
    }
    if (stopping && std::chrono::steady_clock::now() > kill_at) {
      signal_all(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace unstuck::dist
