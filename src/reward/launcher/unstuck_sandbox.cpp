// unstuck-sandbox: runs one untrusted program confined (the runner in src/reward/sandbox.cpp starts
// one per job) and says how it ended. The job is PID 1 of new user/PID/network/IPC/UTS/mount
// namespaces (when it ends the kernel kills everything it left), in a private root that holds only
// the system's folders and --read folders (read-only) and its own folder (a tmpfs of --disk-mb, gone
// with the job), under Landlock, rlimits, a clean environment; it dies with the launcher
// (PR_SET_PDEATHSIG).
//
//   unstuck-sandbox --cpu S --memory-mb M --file-mb F --disk-mb D --processes P --open-files N --dir TMPDIR
//       [--read PATH]... [--isolate yes|no] [--namespaces yes|no] [--landlock yes|no]
//       [--status-fd FD] [--parent-pid PID] -- PROGRAM ARGS...
//
// Report on --status-fd (close-on-exec, so the program never holds it), one line each:
//   "pid N"          the job exists (N: its pid and process group, as the launcher sees them)
//   "setup WHAT: WHY" a setup step failed; the launcher exits 125 (also printed on stderr)
//   "exit N" / "signal N"  how the job ended, the last line. The launcher exits N or 128+N.
// Only the report tells a job's own exit 125 from a setup failure. --isolate no (= --namespaces no
// --landlock no) keeps the rlimits, the session kill, the clean environment, the folder and the
// seccomp filter (no new AF_UNIX sockets, no io_uring, no ptrace or process_vm_readv/writev).
//
// As root (uid 0) RLIMIT_NPROC binds nothing (the kernel exempts root), so the job runs as nobody
// (65534) with no capability: root-only files stay unreadable; with namespaces, root and nobody are
// both mapped into its user namespace (root builds the private root, then drops).
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS SECCOMP_RET_KILL
#endif
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif

namespace {

constexpr int kSetupFailed = 125;
constexpr unsigned kNobody = 65534;

// Landlock's ABI, defined here so that old kernel headers do not matter (linux/landlock.h).
constexpr long kLandlockCreateRuleset = 444, kLandlockAddRule = 445, kLandlockRestrictSelf = 446;
constexpr uint32_t kLandlockVersion = 1U << 0;
constexpr int kRulePathBeneath = 1;
constexpr uint64_t kFsExecute = 1ULL << 0, kFsWriteFile = 1ULL << 1, kFsReadFile = 1ULL << 2, kFsReadDir = 1ULL << 3,
                   kFsRefer = 1ULL << 13, kFsTruncate = 1ULL << 14, kFsIoctlDev = 1ULL << 15;
constexpr uint64_t kFsAbi1 = (1ULL << 13) - 1;  // execute .. make_sym
constexpr uint64_t kFileRights = kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;
constexpr uint64_t kNetBindTcp = 1, kNetConnectTcp = 2;
constexpr uint64_t kScopeAbstractUnixSocket = 1, kScopeSignal = 2;

struct RulesetAttr {  // ABI 1-3 read 8 bytes, ABI 4-5 16, ABI 6+ 24
  uint64_t handled_access_fs, handled_access_net, scoped;
};
struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};

struct Options {
  long cpu_s = 5, memory_mb = 1024, file_mb = 16, processes = 16, open_files = 64, disk_mb = 64;
  std::string dir;
  std::vector<std::string> reads;
  bool namespaces = true, landlock = true;
  int status_fd = -1;
  long parent_pid = 0;
  std::vector<std::string> argv;  // the program and its arguments
};

int g_status_fd = -1;
pid_t g_job = 0;  // in the launcher: the job, killed when a later setup step fails

void report(const std::string& line) {
  if (g_status_fd < 0) return;
  const std::string text = line + "\n";
  (void)!::write(g_status_fd, text.data(), text.size());
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "unstuck-sandbox: %s\n", message.c_str());
  report("setup " + message);
  if (g_job > 0) ::kill(g_job, SIGKILL);
  ::_exit(kSetupFailed);
}

[[noreturn]] void fail_errno(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

// ---- arguments ----

long number(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno || end == text || *end || v < 0)
    fail(std::string("arguments: ") + flag + " wants a number >= 0, got '" + text + "'");
  return v;
}

bool yes_no(const char* flag, const std::string& text) {
  if (text == "yes") return true;
  if (text == "no") return false;
  fail(std::string("arguments: ") + flag + " wants yes or no, got '" + text + "'");
}

Options parse_options(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--") break;
    if (i + 1 >= argc) fail("arguments: " + flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--cpu")
      o.cpu_s = number("--cpu", value);
    else if (flag == "--memory-mb")
      o.memory_mb = number("--memory-mb", value);
    else if (flag == "--file-mb")
      o.file_mb = number("--file-mb", value);
    else if (flag == "--disk-mb")
      o.disk_mb = number("--disk-mb", value);
    else if (flag == "--processes")
      o.processes = number("--processes", value);
    else if (flag == "--open-files")
      o.open_files = number("--open-files", value);
    else if (flag == "--dir")
      o.dir = value;
    else if (flag == "--read")
      o.reads.push_back(value);
    else if (flag == "--isolate")
      o.namespaces = o.landlock = yes_no("--isolate", value);
    else if (flag == "--namespaces")
      o.namespaces = yes_no("--namespaces", value);
    else if (flag == "--landlock")
      o.landlock = yes_no("--landlock", value);
    else if (flag == "--status-fd")
      o.status_fd = int(number("--status-fd", value));
    else if (flag == "--parent-pid")
      o.parent_pid = number("--parent-pid", value);
    else
      fail("arguments: unknown option '" + flag + "'");
  }
  for (++i; i < argc; ++i) o.argv.push_back(argv[i]);
  if (o.argv.empty()) fail("arguments: no program after --");
  if (o.dir.empty() || o.dir[0] != '/') fail("arguments: --dir wants an absolute folder, got '" + o.dir + "'");
  return o;
}

// Every descriptor but stdin, stdout, stderr and the report: nothing of the caller's reaches the job.
void close_inherited_fds(int keep) {
  const auto close_from = [](unsigned first, unsigned last) {
    if (first > last) return;
    if (::syscall(SYS_close_range, first, last, 0) == 0) return;
    const long max = std::min(::sysconf(_SC_OPEN_MAX), 1L << 16);
    for (long fd = first; fd <= std::min<long>(last, max); ++fd) ::close(int(fd));
  };
  if (keep < 3) {
    close_from(3, ~0U);
    return;
  }
  close_from(3, unsigned(keep) - 1);
  close_from(unsigned(keep) + 1, ~0U);
}

// ---- the job's side, from its start to exec ----

struct Job {
  const Options* options;
  int handshake;  // the job's end of the socket pair to the launcher
};

// True while the launcher holds its end of the handshake (it closes only by exiting).
bool launcher_alive(int handshake) {
  char c;
  const ssize_t n = ::recv(handshake, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n != 0;
}

// Dies with the launcher; called again after every change of credentials, which clears it.
void die_with_launcher(int handshake) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_errno("prctl PR_SET_PDEATHSIG");
  if (!launcher_alive(handshake)) ::_exit(kSetupFailed);
}

// Root -> nobody, with no capability left: in the private root (below) every folder on the way to
// the interpreter is ours and traversable, so nothing needs CAP_DAC_READ_SEARCH, which would also
// read root-only files. Without namespaces (no private root) an interpreter under a private folder
// such as /root does not start: the verifier says so at its start.
void drop_to_nobody(int handshake) {
  if (::setgroups(0, nullptr) != 0) fail_errno("setgroups");
  if (::setresgid(kNobody, kNobody, kNobody) != 0) fail_errno("setresgid 65534");
  if (::setresuid(kNobody, kNobody, kNobody) != 0) fail_errno("setresuid 65534");
  die_with_launcher(handshake);
}

// ---- the private root: the job sees only the system's folders, its --read folders (read-only)
// and its own folder, a tmpfs of --disk-mb ----

void make_dirs(const std::string& path, mode_t mode) {
  for (std::size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string part = path.substr(0, at);
    if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST) fail_errno("private root: mkdir " + part);
  }
}

// The flags a read-only remount must keep (a user namespace may not clear them).
unsigned long kept_flags(const std::string& path) {
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) != 0) return 0;
  unsigned long f = 0;
  if (v.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (v.f_flag & ST_NODEV) f |= MS_NODEV;
  if (v.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (v.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (v.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (v.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

// `host` (a folder or a file) at the same path under `root`, read-only unless `writable` (the
// devices); a symbolic link is copied as a link (merged-/usr systems: /lib -> usr/lib). A path that
// is not there is skipped.
void bind_into(const std::string& root, const std::string& host, bool writable = false) {
  if (host.empty() || host == "/" || host[0] != '/')
    fail("private root: --read '" + host + "': name the folders the program needs (absolute, not /)");
  struct stat st {};
  if (::lstat(host.c_str(), &st) != 0) return;
  const std::string target = root + host;
  make_dirs(target.substr(0, target.rfind('/')), 0755);
  if (S_ISLNK(st.st_mode)) {
    char link[4096];
    const ssize_t n = ::readlink(host.c_str(), link, sizeof link - 1);
    if (n <= 0) return;
    link[n] = 0;
    if (::symlink(link, target.c_str()) != 0 && errno != EEXIST) fail_errno("private root: symlink " + host);
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    if (::mkdir(target.c_str(), 0755) != 0 && errno != EEXIST) fail_errno("private root: mkdir " + target);
  } else {
    const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail_errno("private root: create " + target);
    ::close(fd);
  }
  if (::mount(host.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    fail_errno("private root: bind " + host);
  if (writable) return;
  const unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | kept_flags(target);
  if (::mount(nullptr, target.c_str(), nullptr, flags, nullptr) != 0) fail_errno("private root: read-only " + host);
}

// Builds the root in a tmpfs mounted over the job's folder (its size bounds what the job writes,
// and it vanishes with the job however deep its folders go), then pivots into it.
void enter_private_root(const Options& o, bool drop) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail_errno("private root: make / private");
  const std::string root = o.dir;
  const std::string size = "size=" + std::to_string(std::max(1L, o.disk_mb)) + "m,nr_inodes=65536,mode=0755";
  if (::mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, size.c_str()) != 0)
    fail_errno("private root: tmpfs on " + root);
  for (const char* system : {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc"}) bind_into(root, system);
  for (const std::string& path : o.reads) bind_into(root, path);
  for (const char* device : {"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"})
    bind_into(root, device, /*writable=*/true);
  const std::string own = root + o.dir;  // the job's folder, at its own path, inside the tmpfs
  make_dirs(own, 0755);
  if (drop && ::chown(own.c_str(), kNobody, kNobody) != 0) fail_errno("private root: chown " + o.dir);
  ::chmod(own.c_str(), 0700);
  if (::chdir(root.c_str()) != 0) fail_errno("private root: chdir");
  if (::syscall(SYS_pivot_root, ".", ".") != 0) fail_errno("private root: pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) fail_errno("private root: detach the old root");
  if (::chdir("/") != 0) fail_errno("private root: chdir /");
}

// Lowers a limit, never above the hard limit the launcher was given.
void limit(int resource, const char* name, rlim_t soft, rlim_t hard) {
  rlimit current{};
  if (::getrlimit(resource, &current) != 0) fail_errno(std::string("getrlimit ") + name);
  if (current.rlim_max != RLIM_INFINITY) {
    soft = std::min(soft, current.rlim_max);
    hard = std::min(hard, current.rlim_max);
  }
  const rlimit lim{soft, hard};
  if (::setrlimit(resource, &lim) != 0) fail_errno(std::string("setrlimit ") + name);
}

void set_limits(const Options& o) {
  limit(RLIMIT_CPU, "RLIMIT_CPU", rlim_t(o.cpu_s), rlim_t(o.cpu_s) + 1);  // SIGXCPU, then SIGKILL
  limit(RLIMIT_AS, "RLIMIT_AS", rlim_t(o.memory_mb) << 20, rlim_t(o.memory_mb) << 20);
  limit(RLIMIT_FSIZE, "RLIMIT_FSIZE", rlim_t(o.file_mb) << 20, rlim_t(o.file_mb) << 20);
  limit(RLIMIT_NPROC, "RLIMIT_NPROC", rlim_t(o.processes), rlim_t(o.processes));
  limit(RLIMIT_NOFILE, "RLIMIT_NOFILE", rlim_t(o.open_files), rlim_t(o.open_files));
  limit(RLIMIT_CORE, "RLIMIT_CORE", 0, 0);
}

// Allows `access` beneath `path`; a path that is not there (or not reachable) is skipped unless required.
void allow(int ruleset, const std::string& path, uint64_t access, uint64_t handled, bool required) {
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (!required && (errno == ENOENT || errno == EACCES || errno == ENOTDIR)) return;
    fail_errno("Landlock: open " + path);
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) access &= kFileRights;
  const PathBeneathAttr rule{access & handled, fd};
  if (::syscall(kLandlockAddRule, ruleset, kRulePathBeneath, &rule, 0) != 0)
    fail_errno("Landlock: add a rule for " + path);
  ::close(fd);
}

// Reads and runs the system's folders and --read; writes only --dir (and /dev/null); no TCP; no
// signals or abstract unix sockets to processes outside the job (ABI >= 6).
void restrict_with_landlock(const Options& o) {
  const long abi = ::syscall(kLandlockCreateRuleset, nullptr, 0, kLandlockVersion);
  if (abi < 1) fail_errno("Landlock");
  uint64_t fs = kFsAbi1;
  if (abi >= 2) fs |= kFsRefer;
  if (abi >= 3) fs |= kFsTruncate;
  if (abi >= 5) fs |= kFsIoctlDev;
  const RulesetAttr attr{fs, abi >= 4 ? kNetBindTcp | kNetConnectTcp : 0,
                         abi >= 6 ? kScopeAbstractUnixSocket | kScopeSignal : 0};
  const std::size_t size = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;
  const int ruleset = int(::syscall(kLandlockCreateRuleset, &attr, size, 0));
  if (ruleset < 0) fail_errno("Landlock: create a ruleset");
  const uint64_t read = kFsExecute | kFsReadFile | kFsReadDir;
  for (const char* system : {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc"})
    allow(ruleset, system, read, fs, false);
  for (const std::string& path : o.reads) allow(ruleset, path, read, fs, false);
  allow(ruleset, "/dev/null", kFsReadFile | kFsWriteFile | kFsTruncate | kFsIoctlDev, fs, false);
  for (const char* device : {"/dev/urandom", "/dev/random", "/dev/zero"})
    allow(ruleset, device, kFsReadFile, fs, false);
  allow(ruleset, o.dir, fs, fs, true);
  if (::syscall(kLandlockRestrictSelf, ruleset, 0) != 0) fail_errno("Landlock: restrict");
  ::close(ruleset);
}

// No ptrace and no cross-process memory access (below). No new AF_UNIX sockets (socketpair still
// works): Landlock before ABI 8 does not stop connect() to a socket file, and one reachable one (a
// D-Bus session bus, docker.sock, an ssh agent) runs commands outside. No io_uring either (it makes
// sockets past this filter). Other syscall ABIs (i386, x32) kill the job. Best effort: a kernel or
// architecture without seccomp filters goes without.
void forbid_unix_sockets() {
#if defined(__x86_64__) || defined(__aarch64__)
#if defined(__x86_64__)
  constexpr uint32_t arch = AUDIT_ARCH_X86_64, foreign_nr = 0x40000000;  // x32 numbers
#else
  constexpr uint32_t arch = AUDIT_ARCH_AARCH64, foreign_nr = 0xffffffff;
#endif
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, foreign_nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      // No reading or writing another process of the job (the assert judge keeps its verdict in
      // its own memory; it is also undumpable, which covers /proc/<pid>/mem where /proc is open).
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ptrace, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pidfd_getfd, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),  // the domain (low half)
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0 && errno != EINVAL) fail_errno("seccomp");
#endif
}

int run_job(void* arg) {
  const Job& job = *static_cast<const Job*>(arg);
  const Options& o = *job.options;
  die_with_launcher(job.handshake);
  char go = 0;
  if (::write(job.handshake, "r", 1) != 1 || ::read(job.handshake, &go, 1) != 1) ::_exit(kSetupFailed);
  if (o.namespaces) enter_private_root(o, go == 'd');
  if (go == 'd') drop_to_nobody(job.handshake);
  if (::setsid() < 0) fail_errno("setsid");
  set_limits(o);
  if (::chdir(o.dir.c_str()) != 0) fail_errno("chdir " + o.dir);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_errno("prctl PR_SET_NO_NEW_PRIVS");
  if (o.landlock) restrict_with_landlock(o);
  forbid_unix_sockets();
  std::vector<std::string> env{"PATH=/usr/local/bin:/usr/bin:/bin",
                               "HOME=" + o.dir,
                               "TMPDIR=" + o.dir,
                               "LANG=C.UTF-8",
                               "PYTHONDONTWRITEBYTECODE=1",
                               "PYTHONHASHSEED=0",
                               "OMP_NUM_THREADS=1",
                               "OPENBLAS_NUM_THREADS=1",
                               "MKL_NUM_THREADS=1"};  // under the process limit
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  environ = envp.data();  // execvp looks PROGRAM up on this PATH and passes this environment
  ::execvp(argv[0], argv.data());
  fail_errno("exec " + o.argv[0]);
}

// ---- the launcher's side ----

bool write_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

// The job's uid/gid maps, written from outside its user namespace. Root maps root and nobody (the
// job then drops to nobody); anyone else maps only itself. False when the job stays who it is.
bool write_id_maps(pid_t job, bool drop) {
  const std::string proc = "/proc/" + std::to_string(job) + "/";
  if (drop) {
    const std::string both = "0 0 1\n65534 65534 1\n";
    if (write_file(proc + "uid_map", both)) {
      if (write_file(proc + "gid_map", both)) return true;
      if (!write_file(proc + "gid_map", "0 0 1\n")) fail_errno("write gid_map");
      return false;
    }
  }
  if (!write_file(proc + "setgroups", "deny") && errno != ENOENT) fail_errno("write setgroups");
  const std::string uid = std::to_string(::geteuid()), gid = std::to_string(::getegid());
  if (!write_file(proc + "uid_map", uid + " " + uid + " 1\n")) fail_errno("write uid_map");
  if (!write_file(proc + "gid_map", gid + " " + gid + " 1\n")) fail_errno("write gid_map");
  return false;
}

pid_t start_job(const Options& o, Job& job) {
  if (!o.namespaces) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_job(&job));
    return pid;
  }
  static char stack[1 << 20] __attribute__((aligned(16)));
  const int flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS | SIGCHLD;
  return ::clone(run_job, stack + sizeof stack, flags, &job);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  g_status_fd = o.status_fd;
  close_inherited_fds(o.status_fd);
  if (g_status_fd >= 0 && ::fcntl(g_status_fd, F_SETFD, FD_CLOEXEC) != 0) fail_errno("--status-fd");
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_errno("prctl PR_SET_PDEATHSIG");
  if (o.parent_pid > 0 && ::getppid() != pid_t(o.parent_pid)) fail("the runner exited before the launcher started");

  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) fail_errno("socketpair");
  Job job{&o, pair[1]};
  const pid_t pid = start_job(o, job);
  if (pid < 0) fail_errno(o.namespaces ? "clone with new namespaces" : "fork");
  g_job = pid;
  ::close(pair[1]);
  ::close(0);  // the job's stdin and stdout are the job's alone: its end is their end
  ::close(1);
  report("pid " + std::to_string(pid));
  char ready = 0;
  if (::read(pair[0], &ready, 1) == 1) {  // else the job already ended: its status says how
    bool drop = ::geteuid() == 0;
    if (o.namespaces) drop = write_id_maps(pid, drop);
    if (drop && !o.namespaces && ::chown(o.dir.c_str(), kNobody, kNobody) != 0) fail_errno("chown " + o.dir);
    if (::write(pair[0], drop ? "d" : "s", 1) != 1) fail_errno("start the job");
  }
  // Waits for the job without reaping it, so that its pid (and group id) stays its own while what it
  // left in its session is killed (with namespaces the kernel has done that already).
  siginfo_t ended{};
  while (::waitid(P_PID, id_t(pid), &ended, WEXITED | WNOWAIT) < 0)
    if (errno != EINTR) fail_errno("waitid");
  if (!o.namespaces) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail_errno("waitpid");
  if (WIFSIGNALED(status)) {
    report("signal " + std::to_string(WTERMSIG(status)));
    return 128 + WTERMSIG(status);
  }
  report("exit " + std::to_string(WEXITSTATUS(status)));
  return WEXITSTATUS(status);
}
