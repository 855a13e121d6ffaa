// The code verifier and its sandbox, on small MBPP, HumanEval and APPS-style records written here:
// passing, failing, partial, endless, crashing and missing programs score as a user expects, and
// hostile programs (fork bomb, memory hog, output flood, writes outside their folder, sockets, kills,
// reading the dataset from disk) are contained while a correct program in the same batch still scores.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/processes.h"
#include "unstuck/common/error.h"
#include "unstuck/reward/sandbox.h"
#include "unstuck/reward/verifier.h"

namespace unstuck::reward {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* const kAdd = "def add(a, b):\n    return a + b\n";

std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

bool isolated() {
  const SandboxCapabilities caps = sandbox_capabilities();
  return caps.namespaces && caps.landlock_abi > 0;
}

#define SKIP_WITHOUT_ISOLATION() \
  if (!isolated()) GTEST_SKIP() << "needs namespaces and Landlock: " << sandbox_capabilities().describe()

// Small limits, so that the endless cases end quickly (the suite runs on 2 cores).
RewardConfig config(bool partial = false) {
  RewardConfig c;
  c.code.python = python();
  c.code.partial = partial;
  c.code.cpu_s = 1;
  c.code.wall_s = 2;
  c.code.memory_mb = 512;
  c.code.output_kb = 64;
  c.code.require_isolation = isolated();  // the plain cases run with resource limits alone elsewhere
  return c;
}

std::string fenced(const std::string& code) { return "Here is my solution:\n```python\n" + code + "```\nDone."; }

data::TaskRecord record(Json fields) {
  data::TaskRecord r;
  r.task = "code";
  r.prompt = "Write the function.";
  r.fields = std::move(fields);
  return r;
}

data::TaskRecord mbpp_add() {
  return record({{"test_list", {"assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"}}});
}

data::TaskRecord humaneval_square() {
  return record({{"test", "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n"},
                 {"entry_point", "square"}});
}

// APPS keeps input_output as a JSON string.
data::TaskRecord apps_sum() {
  return record({{"input_output", Json{{"inputs", {"1 2\n", "5 7\n"}}, {"outputs", {"3\n", "12\n"}}}.dump()}});
}

data::TaskRecord apps_call() {
  return record({{"input_output", {{"fn_name", "add"}, {"inputs", {{1, 2}, {3, 4}}}, {"outputs", {{3}, 7}}}}});
}

std::vector<RewardResult> score(const Verifier& v, const std::vector<std::string>& completions,
                                const data::TaskRecord& r) {
  return v.score_batch(completions, std::vector<const data::TaskRecord*>(completions.size(), &r), {});
}

using unstuck::testing::processes_with;

std::string unique(const std::string& what) {
  return "unstuck-" + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(Clock::now().time_since_epoch().count());
}

// ---- scoring ----

TEST(CodeVerifier, CorrectProgramsScoreOneInEveryTestFormat) {
  const auto v = make_code_verifier(config());
  const auto mbpp = score(*v, {fenced(kAdd)}, mbpp_add());
  const auto human = score(*v, {fenced("def square(x):\n    return x * x\n")}, humaneval_square());
  const auto stdio = score(*v, {fenced("a, b = map(int, input().split())\nprint(a + b)\n")}, apps_sum());
  const auto call = score(*v, {fenced(kAdd)}, apps_call());
  for (const auto* r : {&mbpp[0], &human[0], &stdio[0], &call[0]}) {
    EXPECT_EQ(r->status, RewardStatus::correct) << r->error;
    EXPECT_EQ(r->reward, 1.0);
    EXPECT_EQ(r->extra.at("code_pass_frac"), 1.0);
    EXPECT_EQ(r->extra.at("code_timeout"), 0.0);
    EXPECT_EQ(r->extra.at("code_crashed"), 0.0);
  }
}

TEST(CodeVerifier, WrongProgramsScoreZero) {
  const auto v = make_code_verifier(config());
  const auto r = score(*v, {fenced("def add(a, b):\n    return a - b\n"), fenced("print(0)\n")}, mbpp_add());
  EXPECT_EQ(r[0].status, RewardStatus::wrong);
  EXPECT_EQ(r[0].reward, 0.0);
  EXPECT_EQ(r[1].status, RewardStatus::wrong);  // defines nothing: NameError in every test
  const auto s = score(*v, {fenced("print(int(input().split()[0]) * 3)\n")}, apps_sum());
  EXPECT_EQ(s[0].status, RewardStatus::wrong);  // 3 is right for "1 2", 15 is not for "5 7"
  EXPECT_EQ(s[0].extra.at("code_pass_frac"), 0.5);
}

TEST(CodeVerifier, PartialCreditIsTheFractionOfTestsPassed) {
  const std::string two_of_three = fenced("def add(a, b):\n    return 1 if a < 0 else a + b\n");
  const auto strict = make_code_verifier(config(false));
  const auto partial = make_code_verifier(config(true));
  const RewardResult s = strict->score(two_of_three, mbpp_add());
  const RewardResult p = partial->score(two_of_three, mbpp_add());
  EXPECT_EQ(s.status, RewardStatus::wrong);
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(p.status, RewardStatus::wrong);
  EXPECT_NEAR(p.reward, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.extra.at("code_pass_frac"), 2.0 / 3.0, 1e-12);
}

TEST(CodeVerifier, OnlyMaxTestsRun) {
  RewardConfig c = config();
  c.code.max_tests = 2;  // the third test (10 + 5) is the one this program fails
  const auto v = make_code_verifier(c);
  const RewardResult r = v->score(fenced("def add(a, b):\n    return 0 if a == 10 else a + b\n"), mbpp_add());
  EXPECT_EQ(r.status, RewardStatus::correct) << r.error;
}

TEST(CodeVerifier, EndlessProgramTimesOutAndLeavesNothing) {
  const std::string token = unique("endless");
  const std::string endless = fenced(
      "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; "
      "time.sleep(60)', '" +
      token + "'])\nwhile True:\n    pass\n");
  const auto v = make_code_verifier(config());
  const auto start = Clock::now();
  const auto r = score(*v, {endless, fenced(kAdd)}, mbpp_add());
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r[0].status, RewardStatus::wrong);
  EXPECT_EQ(r[0].extra.at("code_timeout"), 1.0);
  EXPECT_EQ(r[1].status, RewardStatus::correct) << r[1].error;
  EXPECT_LT(took, 8.0);  // wall_s 2, cpu_s 1 (slack for a loaded machine)
  EXPECT_EQ(processes_with(token), 0);
}

TEST(CodeVerifier, CrashingProgramsScoreWrong) {
  const auto v = make_code_verifier(config());
  const auto r = score(*v,
                       {fenced("raise ValueError('no')\n" + std::string(kAdd)), fenced("import sys\nsys.exit(3)\n"),
                        fenced("import ctypes\nctypes.string_at(0)\n"), fenced(kAdd)},
                       mbpp_add());
  for (int k = 0; k < 3; ++k) EXPECT_EQ(r[k].status, RewardStatus::wrong) << k;
  EXPECT_EQ(r[2].extra.at("code_crashed"), 1.0);  // SIGSEGV
  EXPECT_EQ(r[3].status, RewardStatus::correct) << r[3].error;
  const auto s = score(*v, {fenced("import sys\nprint(3)\nsys.exit(3)\n")}, apps_sum());
  EXPECT_EQ(s[0].extra.at("code_pass_frac"), 0.0);  // the right output, but a failing exit status
}

TEST(CodeVerifier, CompletionWithoutCodeIsNoAnswer) {
  const auto v = make_code_verifier(config());
  const auto r = score(*v, {"The answer is to add a and b.", "```python\n\n```", ""}, mbpp_add());
  for (const RewardResult& x : r) {
    EXPECT_EQ(x.status, RewardStatus::no_answer);
    EXPECT_EQ(x.reward, 0.0);
  }
  RewardConfig whole = config();
  whole.code.extract = CodeExtract::whole;
  EXPECT_EQ(make_code_verifier(whole)->score(kAdd, mbpp_add()).status, RewardStatus::correct);
}

TEST(CodeVerifier, FirstOrLastBlockIsTheProgram) {
  const std::string two = "First try:\n```py\ndef add(a, b):\n    return a * b\n```\nBetter:\n  ```\n  " +
                          std::string("def add(a, b):\n      return a + b\n  ```\n");
  RewardConfig first = config();
  first.code.extract = CodeExtract::first_block;
  EXPECT_EQ(make_code_verifier(config())->score(two, mbpp_add()).status, RewardStatus::correct);
  EXPECT_EQ(make_code_verifier(first)->score(two, mbpp_add()).status, RewardStatus::wrong);
}

TEST(CodeVerifier, CallsOfFnNameCompareOutsideTheSandbox) {
  const auto v = make_code_verifier(config());
  const std::string leetcode = "class Solution:\n    def add(self, a, b):\n        return a + b\n";
  const auto r = score(*v,
                       {fenced(leetcode), fenced("def add(a, b):\n    return [a + b]\n"),
                        fenced("def add(a, b):\n    return str(a + b)\n")},
                       apps_call());
  EXPECT_EQ(r[0].status, RewardStatus::correct) << r[0].error;
  EXPECT_EQ(r[1].status, RewardStatus::wrong);  // [3] for the expected [3] passes; [7] is not 7
  EXPECT_EQ(r[1].extra.at("code_pass_frac"), 0.5);
  EXPECT_EQ(r[2].status, RewardStatus::wrong);  // "3" is not 3
}

TEST(CodeVerifier, RecordWithoutTestsIsAUserError) {
  const auto v = make_code_verifier(config());
  try {
    v->score(fenced(kAdd), record({{"solution", "x"}}));
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "reward.verifier code: the record has none of test_list, test + entry_point, input_output (its "
              "fields: solution)");
  }
}

TEST(CodeVerifier, MissingInterpreterIsAUserError) {
  RewardConfig c = config();
  c.code.python = "no-such-python-3";
  EXPECT_THROW(make_code_verifier(c), UserError);
}

// ---- the sandbox itself ----

SandboxOptions plain() {
  SandboxOptions o;
  o.limits.cpu_s = 1;
  o.limits.wall_s = 2;
  o.limits.memory_mb = 512;
  o.limits.output_kb = 64;
  o.require_isolation = false;
  return o;
}

SandboxJob py(const std::string& code, std::string input = "") {
  return {{python(), "-I", "-c", code}, std::move(input)};
}

TEST(CodeSandbox, ReportsHowEachJobEnded) {
  const std::string big(1 << 20, 'x');  // more than a pipe holds: written while the job reads
  const auto out = run_sandboxed(
      {py("import sys; d = sys.stdin.read(); print(len(d)); sys.stderr.write('e'); sys.exit(7)", big),
       py("import ctypes; ctypes.string_at(0)"),
       py("while True: pass"),
       py("while True: print('x' * 999)"),
       {{"/no/such/program"}, ""},
       py("open('f', 'w').write('kept'); print(open('f').read())"),
       py("pass", big)},  // never reads its stdin: our write fails with EPIPE, and no SIGPIPE kills the test
      plain());
  EXPECT_EQ(out[0].end, SandboxEnd::exited);
  EXPECT_EQ(out[0].exit_code, 7);
  EXPECT_EQ(out[0].out, std::to_string(big.size()) + "\n");
  EXPECT_EQ(out[0].err, "e");
  EXPECT_EQ(out[1].end, SandboxEnd::signaled);
  EXPECT_EQ(out[1].signal, SIGSEGV);
  EXPECT_TRUE(out[2].end == SandboxEnd::signaled || out[2].end == SandboxEnd::timed_out);  // CPU limit or wall
  EXPECT_LT(out[2].wall_s, 3.0);
  EXPECT_EQ(out[3].end, SandboxEnd::output_limit);
  EXPECT_LE(out[3].out.size() + out[3].err.size(), std::size_t(64) << 10);
  EXPECT_EQ(out[4].end, SandboxEnd::failed);
  EXPECT_NE(out[4].err.find("/no/such/program"), std::string::npos) << out[4].err;
  EXPECT_EQ(out[5].end, SandboxEnd::exited) << out[5].err;
  EXPECT_EQ(out[5].out, "kept\n");  // its own folder is writable
  EXPECT_EQ(out[6].end, SandboxEnd::exited) << out[6].err;
}

TEST(CodeSandbox, ForkBombStopsAtTheProcessLimit) {
  SKIP_WITHOUT_ISOLATION();  // without a user namespace the count includes all of the user's processes
  SandboxOptions o = plain();
  o.limits.processes = 8;
  const auto out = run_sandboxed({py("import os, time\nn = 0\nfor _ in range(500):\n    try:\n        pid = os.fork()\n"
                                     "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n"
                                     "        os._exit(0)\n    n += 1\nprint(n)")},
                                 o);
  ASSERT_EQ(out[0].end, SandboxEnd::exited) << out[0].err;
  EXPECT_LT(std::stoi(out[0].out), 8);
}

TEST(CodeSandbox, NoJobProcessReadsAnothersMemory) {
  // A parent and a child of the same job: the child tries ptrace and process_vm_readv on the parent,
  // which the seccomp filter refuses on any kernel (/proc/<pid>/mem is Landlock's and undumpable's).
  const std::string program =
      "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nr, w = os.pipe()\n"
      "if os.fork() == 0:\n    p = os.getppid()\n    got = []\n"
      "    got.append('ptrace' if libc.ptrace(16, p, 0, 0) == 0 else 'no-ptrace')\n"
      "    buf = ctypes.create_string_buffer(8)\n"
      "    class Iov(ctypes.Structure):\n        _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
      "    mine, theirs = Iov(ctypes.cast(buf, ctypes.c_void_p), 8), Iov(id(buf), 8)\n"
      "    n = libc.process_vm_readv(p, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)\n"
      "    got.append('vm_read' if n > 0 else 'no-vm_read')\n"
      "    os.write(w, ' '.join(got).encode())\n    os._exit(0)\n"
      "os.close(w)\nprint(os.read(r, 100).decode())\n";
  const auto out = run_sandboxed({py(program)}, plain());
  ASSERT_EQ(out[0].end, SandboxEnd::exited) << out[0].err;
  EXPECT_EQ(out[0].out, "no-ptrace no-vm_read\n");
}

// The user's files: one in a folder the programs may read (reward.code.read_paths) and one in an
// open folder elsewhere. A program sees only its private root: it cannot stat, chmod, chown or touch
// either, nor the folders, and as root it cannot read a root-only file even where it may read.
TEST(CodeSandbox, ProgramsSeeNoFileOfTheUsersAndChangeNone) {
  SKIP_WITHOUT_ISOLATION();
  const fs::path readable = fs::temp_directory_path() / unique("readable");
  const fs::path elsewhere = fs::temp_directory_path() / unique("elsewhere");
  fs::create_directories(readable);
  fs::create_directories(elsewhere);
  fs::permissions(readable, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(elsewhere, fs::perms::all);
  const fs::path shared = readable / "shared.txt", own = readable / "own.txt", mine = elsewhere / "mine.txt";
  std::ofstream(shared) << "shared";
  std::ofstream(own) << "private";
  std::ofstream(mine) << "mine";
  fs::permissions(own, fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(shared,
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  const auto before = [](const fs::path& p) {
    struct stat st {};
    ::stat(p.c_str(), &st);
    return std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + " " + std::to_string(st.st_mtime);
  };
  std::vector<std::string> was;
  for (const fs::path& p : {shared, own, mine, readable, elsewhere}) was.push_back(before(p));
  const std::string program =
      "import os\ndone = []\npaths = " +
      Json::array({shared.string(), own.string(), mine.string(), readable.string(), elsewhere.string()}).dump() +
      "\nfor p in paths:\n"
      "    for what, act in (('chmod', lambda: os.chmod(p, 0o777)), ('utime', lambda: os.utime(p, (0, 0))),\n"
      "                      ('chown', lambda: os.chown(p, os.getuid(), os.getgid()))):\n"
      "        try:\n            act()\n            done.append(what + ' ' + p)\n        except OSError:\n            "
      "pass\n"
      "for p in (paths[2], paths[4]):\n    try:\n        os.stat(p)\n        done.append('stat ' + p)\n    except "
      "OSError:\n"
      "        pass\n"
      "try:\n    open(paths[1]).read()\n    done.append('read own')\nexcept OSError:\n    pass\n"
      "print(open(paths[0]).read(), sorted(done))\n";
  SandboxOptions o = plain();
  o.require_isolation = true;
  o.read_paths = {readable.string()};
  const auto out = run_sandboxed({py(program)}, o);
  ASSERT_EQ(out[0].end, SandboxEnd::exited) << out[0].err;
  // As root the program is nobody: the root-only file is closed to it. As a user it is that user,
  // and a file of its own in a folder it may read is its to read.
  EXPECT_EQ(out[0].out, ::geteuid() == 0 ? "shared []\n" : "shared ['read own']\n");
  for (std::size_t k = 0; k < was.size(); ++k)
    EXPECT_EQ(before(std::vector<fs::path>{shared, own, mine, readable, elsewhere}[k]), was[k]) << k;
  fs::remove_all(readable);
  fs::remove_all(elsewhere);
}

// A program's writes land in a tmpfs of disk_mb: more is ENOSPC, and nothing of it (200 nested
// folders included) is left on the disk afterwards.
TEST(CodeSandbox, WritesAreBoundedAndLeaveNothing) {
  SKIP_WITHOUT_ISOLATION();
  const fs::path tmp = fs::temp_directory_path() / unique("tmpdir");
  fs::create_directories(tmp);
  const char* saved = std::getenv("TMPDIR");
  const std::string saved_value = saved ? saved : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  SandboxOptions o = plain();
  o.limits.disk_mb = 8;
  const std::string program =
      "import os\nwritten = 0\ntry:\n    for k in range(100):\n        with open('f%d' % k, 'wb') as f:\n"
      "            f.write(b'x' * (1 << 20))\n        written += 1\nexcept OSError:\n    pass\n"
      "path = '.'\nfor k in range(200):\n    path = os.path.join(path, 'd')\n    os.mkdir(path)\n"
      "print(written)\n";
  const auto out = run_sandboxed({py(program)}, o);
  if (saved)
    ::setenv("TMPDIR", saved_value.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  ASSERT_EQ(out[0].end, SandboxEnd::exited) << out[0].err;
  EXPECT_LE(std::stoi(out[0].out), 8);
  EXPECT_GE(std::stoi(out[0].out), 5);  // 8 MiB of tmpfs hold at least 5 files of 1 MiB
  EXPECT_TRUE(fs::is_empty(tmp)) << "left in " << tmp;
  fs::remove_all(tmp);
}

TEST(CodeSandbox, MissingLauncherIsAUserError) {
  ::setenv("UNSTUCK_SANDBOX", "/no/such/unstuck-sandbox", 1);
  EXPECT_THROW(run_sandboxed({py("pass")}, plain()), UserError);
  ::unsetenv("UNSTUCK_SANDBOX");
}

// ---- hostile programs: each contained, and a correct program beside it still correct ----

// `hostile` defines add() right only when its attack failed.
void expect_contained(const std::string& hostile) {
  const auto v = make_code_verifier(config());
  const auto start = Clock::now();
  const auto r = score(*v, {fenced(hostile), fenced(kAdd)}, mbpp_add());
  EXPECT_EQ(r[0].status, RewardStatus::correct) << "the attack got through: " << r[0].error;
  EXPECT_EQ(r[1].status, RewardStatus::correct) << r[1].error;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 8.0);  // wall_s 2, with slack
}

std::string add_if(const std::string& contained) {
  return "def add(a, b):\n    return a + b if " + contained + " else a - b\n";
}

TEST(CodeVerifierHostile, ForkBombIsBoundedAndLeavesNothing) {
  SKIP_WITHOUT_ISOLATION();
  const std::string token = unique("forkbomb");
  expect_contained(
      "import os, sys\nn = 0\nfor _ in range(500):\n    try:\n        pid = os.fork()\n"
      "    except OSError:\n        break\n    if pid == 0:\n        os.execv(sys.executable, "
      "[sys.executable, '-c', 'import time; time.sleep(60)', '" +
      token + "'])\n    n += 1\n" + add_if("n < 16"));
  EXPECT_EQ(processes_with(token), 0);
}

TEST(CodeVerifierHostile, MemoryHogFailsWithinItsLimit) {  // resource limits: no isolation needed
  expect_contained("try:\n    hog = bytearray(10 * 1024 ** 3)\n    got = True\nexcept MemoryError:\n    got = False\n" +
                   add_if("not got"));
}

TEST(CodeVerifierHostile, OutputFloodIsCut) {  // resource limits: no isolation needed
  const auto v = make_code_verifier(config());
  const auto r = score(*v, {fenced("while True:\n    print('x' * 1000)\n"), fenced(kAdd)}, mbpp_add());
  EXPECT_EQ(r[0].status, RewardStatus::wrong);
  EXPECT_EQ(r[0].extra.at("code_crashed"), 1.0);
  EXPECT_EQ(r[1].status, RewardStatus::correct) << r[1].error;
}

TEST(CodeVerifierHostile, WritesOutsideItsFolderFail) {
  SKIP_WITHOUT_ISOLATION();
  const fs::path open_dir = fs::temp_directory_path() / unique("open");
  fs::create_directories(open_dir);
  fs::permissions(open_dir, fs::perms::all);  // writable by anyone: only the sandbox stops the write
  const fs::path beside = fs::read_symlink("/proc/self/exe").parent_path() / unique("beside");
  const fs::path in_open = open_dir / "x", in_tmp = fs::temp_directory_path() / unique("escape");
  expect_contained("made = 0\nfor path in ['" + in_open.string() + "', '" + beside.string() + "', '" + in_tmp.string() +
                   "']:\n    try:\n        open(path, 'w').write('x')\n        made += 1\n    except OSError:\n"
                   "        pass\n" +
                   add_if("made == 0"));
  for (const fs::path& p : {in_open, beside, in_tmp}) {
    EXPECT_FALSE(fs::exists(p)) << p;
    fs::remove(p);
  }
  fs::remove_all(open_dir);
}

// A listening socket of the test's own, TCP on 127.0.0.1 or a socket file anyone may connect to.
int listen_tcp(std::string& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 8) != 0) return -1;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = std::to_string(ntohs(addr.sin_port));
  return fd;
}

int listen_unix(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 8) != 0) return -1;
  fs::permissions(path, fs::perms::all);
  return fd;
}

TEST(CodeVerifierHostile, NetworkAndSocketFilesAreUnreachable) {
  SKIP_WITHOUT_ISOLATION();
  const fs::path dir = fs::temp_directory_path() / unique("sockets");
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::all);
  std::string port;
  const int tcp = listen_tcp(port), file = listen_unix(dir / "s");
  ASSERT_GE(tcp, 0);
  ASSERT_GE(file, 0);
  expect_contained("import socket\nreached = 0\nfor host, port in [('127.0.0.1', " + port +
                   "), ('1.1.1.1', 80), ('8.8.8.8', 53)]:\n    try:\n        socket.create_connection((host, port), "
                   "timeout=1)\n        reached += 1\n    except OSError:\n        pass\ntry:\n    s = "
                   "socket.socket(socket.AF_UNIX)\n    s.connect('" +
                   (dir / "s").string() +
                   "')\n    reached += 1\n"
                   "except OSError:\n    pass\n" +
                   add_if("reached == 0"));
  EXPECT_LT(::accept(tcp, nullptr, nullptr), 0);  // nobody connected
  EXPECT_LT(::accept(file, nullptr, nullptr), 0);
  ::close(tcp);
  ::close(file);
  fs::remove_all(dir);
}

TEST(CodeVerifierHostile, KillsDoNotReachOutside) {
  SKIP_WITHOUT_ISOLATION();
  // A bystander that kill(-1) would hit without the PID namespace and Landlock's signal scope: a
  // process of the programs' own user (nobody when the test runs as root).
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t bystander = ::fork();
  if (bystander == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(1);
    (void)!::write(ready[1], "r", 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the bystander did not start";
  ::close(ready[0]);
  ::close(ready[1]);
  const auto v = make_code_verifier(config());
  const std::string killer =
      "import os, signal\nfor target in (os.getppid(), -1):\n    try:\n        os.kill(target, "
      "signal.SIGKILL)\n    except OSError:\n        pass\n";
  const auto r = score(*v, {fenced(killer + kAdd), fenced(kAdd)}, mbpp_add());
  EXPECT_NE(r[0].status, RewardStatus::error) << "the launcher died: " << r[0].error;
  EXPECT_EQ(r[1].status, RewardStatus::correct) << r[1].error;
  int status = 0;
  EXPECT_EQ(::waitpid(bystander, &status, WNOHANG), 0) << "the bystander was killed";
  ::kill(bystander, SIGKILL);
  ::waitpid(bystander, &status, 0);
}

TEST(CodeVerifierHostile, DatasetOnDiskIsUnreadable) {
  SKIP_WITHOUT_ISOLATION();
  const fs::path dir = fs::temp_directory_path() / unique("dataset");
  fs::create_directories(dir);
  const Json io{{"inputs", {"42\n"}}, {"outputs", {"4242\n"}}};
  const fs::path file = dir / "train.jsonl";
  std::ofstream(file) << Json{{"task", "code"},
                              {"prompt", "Print the input twice."},
                              {"answer", ""},
                              {"input_output", io.dump()}}
                             .dump()
                      << "\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const auto v = make_code_verifier(config());
  const std::string cheat = "import json\ntry:\n    row = json.loads(open('" + file.string() +
                            "').readline())\n    print(json.loads(row['input_output'])['outputs'][0], end='')\n"
                            "except OSError:\n    print('unknown')\n";
  const auto r = score(*v, {fenced(cheat), fenced("print(input() * 2)\n")}, record({{"input_output", io}}));
  EXPECT_EQ(r[0].status, RewardStatus::wrong);
  EXPECT_EQ(r[1].status, RewardStatus::correct) << r[1].error;
  fs::remove_all(dir);
}

// ---- forging an assert verdict: every trick inside the program scores 0 ----

// A record in APPS's assert form: imports of the tests' own, a float check, an order-free check.
data::TaskRecord apps_asserts() {
  return record({{"test_imports", {"import math"}},
                 {"test_list",
                  {"assert math.isclose(area(2.0), 12.566370614359172, rel_tol=1e-9)",
                   "assert sorted(divisors(12)) == [1, 2, 3, 4, 6, 12]", "assert divisors(7) == [1, 7]"}}});
}

const char* const kSolvesAll =
    "import math\n"
    "def add(a, b):\n    return a + b\n"
    "def square(x):\n    return x * x\n"
    "def area(r):\n    return math.pi * r * r\n"
    "def divisors(n):\n    return [d for d in range(1, n + 1) if n % d == 0]\n";

// Answers to every record, returning `value` (wrong for every test unless an attack makes it pass).
std::string wrong_returning(const std::string& value) {
  return "def add(a, b):\n    return " + value + "\ndef square(x):\n    return " + value +
         "\ndef area(r):\n    return " + value + "\ndef divisors(n):\n    return " + value + "\n";
}

// Ways a program could try to pass without solving: read the judge's job (globals of __main__, the
// garbage collector, frames, the parent's memory), print a pass line and leave, write to every
// descriptor and to the parent's, kill the parent, return objects that equal everything, shadow or patch what the
// tests compute with, exit or interrupt inside a call.
std::vector<std::pair<std::string, std::string>> forgeries() {
  const std::string pass_line =
      "def _pass_line(nonce, n=8):\n    return (str(nonce) + ' ' + '1' * n + ' alive\\n').encode()\n";
  const std::string hexes =
      "import gc, sys, re, os\n_found = set()\n"
      "def _look(v):\n    if isinstance(v, str) and re.fullmatch('[0-9a-f]{32}', v):\n        _found.add(v)\n"
      "for _o in gc.get_objects():\n    if isinstance(_o, dict):\n        for _v in list(_o.values()):\n"
      "            _look(_v)\n"
      "_f = sys._getframe()\nwhile _f:\n    for _v in list(_f.f_locals.values()) + list(_f.f_globals.values()):\n"
      "        _look(_v)\n    _f = _f.f_back\n";
  std::vector<std::pair<std::string, std::string>> tricks = {
      {"the universal pass: __main__'s job",
       "import __main__, os\njob = getattr(__main__, '_job', None) or {}\n"
       "os.write(1, (str(job.get('nonce', '')) + ' ' + '1' * len(job.get('tests', [0] * 3)) + '\\n').encode())\n"
       "os._exit(0)\n"},
      {"nonces from gc and frames, printed",
       hexes + pass_line + "for _n in _found:\n    for _k in range(1, 9):\n        os.write(1, _pass_line(_n, _k))\n" +
           "os._exit(0)\n"},
      {"pass lines on every descriptor",
       hexes + pass_line +
           "for _fd in range(0, 64):\n    for _n in list(_found) + ['0' * 32]:\n        for _k in (1, 3):\n"
           "            try:\n                os.write(_fd, _pass_line(_n, _k))\n            except OSError:\n"
           "                pass\n" +
           wrong_returning("-7")},
      {"the parent's memory and descriptors through /proc",
       pass_line +
           "import os, re\nfor _p in (os.getppid(), 1):\n    try:\n        _found = set()\n"
           "        _mem = open('/proc/%d/mem' % _p, 'rb')\n"
           "        for _line in open('/proc/%d/maps' % _p).read().splitlines():\n"
           "            _range, _perms = _line.split()[:2]\n            if not _perms.startswith('rw'):\n"
           "                continue\n            _a, _b = (int(x, 16) for x in _range.split('-'))\n"
           "            try:\n                _mem.seek(_a)\n                _chunk = _mem.read(_b - _a)\n"
           "            except (OSError, ValueError, OverflowError):\n                continue\n"
           "            _found.update(m.decode() for m in re.findall(rb'[0-9a-f]{32}', _chunk))\n"
           "        _out = os.open('/proc/%d/fd/1' % _p, os.O_WRONLY)\n"
           "        for _n in _found:\n            for _k in (1, 3):\n                os.write(_out, _pass_line(_n, "
           "_k))\n"
           "    except OSError:\n        pass\n" +
           wrong_returning("-7")},
      {"kill the parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + wrong_returning("-7")},
      {"objects equal to everything",
       "class _All:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __lt__ = __le__ = __gt__ = "
       "__ge__ = __eq__\n    __bool__ = lambda s: True\n    __hash__ = lambda s: 0\n"
       "    __sub__ = __rsub__ = lambda s, o: 0\n    __abs__ = lambda s: 0\n" +
           wrong_returning("_All()")},
      {"builtin types with their comparisons replaced",
       "class _I(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
       "class _L(list):\n    __eq__ = lambda s, o: True\n"
       "class _F(float):\n    __eq__ = lambda s, o: True\n"
       "def add(a, b):\n    return _I(-7)\ndef square(x):\n    return _I(-7)\ndef area(r):\n    return _F(0.0)\n"
       "def divisors(n):\n    return _L([0])\n"},
      {"an object that claims to be an int",
       "class _Liar:\n    __class__ = int\n    __eq__ = lambda s, o: True\n    __hash__ = lambda s: 0\n" +
           wrong_returning("_Liar()")},
      {"the tests' names shadowed",
       "class _M:\n    isclose = staticmethod(lambda *a, **k: True)\n    pi = 0\nmath = _M()\n"
       "sorted = set = list = lambda *a, **k: [1, 2, 3, 4, 6, 12]\nisinstance = lambda *a: True\n"
       "abs = lambda x: 0\ncheck = lambda candidate: None\nAssertionError = None\n" +
           wrong_returning("-7")},
      {"builtins and the assert machinery patched",
       "import builtins, os, sys\nbuiltins.AssertionError = type('E', (BaseException,), {})\n"
       "builtins.sorted = lambda *a, **k: [1, 2, 3, 4, 6, 12]\nbuiltins.isinstance = lambda *a: True\n"
       "builtins.list = lambda *a: [1, 2, 3, 4, 6, 12]\nos._exit = sys.exit = lambda *a: None\n"
       "sys.modules['math'].isclose = lambda *a, **k: True\n" +
           wrong_returning("-7")},
      {"exit inside a call", "import os\n" + wrong_returning("os._exit(0)")},
      {"SystemExit inside a call", "import sys\n" + wrong_returning("sys.exit(0)")},
      {"KeyboardInterrupt inside a call", wrong_returning("(_ for _ in ()).throw(KeyboardInterrupt())")},
      {"a thread that prints pass lines",
       hexes + pass_line +
           "import threading, time\ndef _spam():\n    while True:\n        for _n in list(_found) + ['0' * 32]:\n"
           "            for _fd in (1, 2):\n                try:\n                    os.write(_fd, _pass_line(_n, "
           "3))\n"
           "                except OSError:\n                    pass\n        time.sleep(0.001)\n"
           "threading.Thread(target=_spam, daemon=True).start()\n" +
           wrong_returning("-7")},
      {"answers to the judge's protocol written by hand",
       "import os, json\nfor _fd in range(3, 16):\n    try:\n"
       "        _b = json.dumps({'r': True, 'loaded': True, 'names': {}}).encode()\n"
       "        os.write(_fd, len(_b).to_bytes(4, 'big') + _b)\n    except OSError:\n        pass\n" +
           wrong_returning("-7")},
  };
  return tricks;
}

TEST(CodeVerifierHostile, NoTrickInsideTheProgramForgesAnAssertVerdict) {
  const auto v = make_code_verifier(config());
  const std::vector<std::pair<std::string, data::TaskRecord>> records = {
      {"MBPP", mbpp_add()}, {"HumanEval", humaneval_square()}, {"APPS asserts", apps_asserts()}};
  const auto tricks = forgeries();
  std::vector<std::string> completions{fenced(kSolvesAll)};
  for (const auto& [name, program] : tricks) completions.push_back(fenced(program));
  for (const auto& [kind, rec] : records) {
    const auto r = score(*v, completions, rec);
    EXPECT_EQ(r[0].status, RewardStatus::correct) << kind << ": the honest program: " << r[0].error;
    EXPECT_EQ(r[0].reward, 1.0) << kind;
    for (std::size_t k = 0; k < tricks.size(); ++k) {
      EXPECT_EQ(r[k + 1].reward, 0.0) << kind << ": " << tricks[k].first << " scored";
      EXPECT_EQ(r[k + 1].extra.at("code_pass_frac"), 0.0) << kind << ": " << tricks[k].first;
      EXPECT_NE(r[k + 1].status, RewardStatus::correct) << kind << ": " << tricks[k].first;
    }
  }
}

// What honest programs return and take crosses the judge's boundary as Python would see it: big and
// special numbers, containers of every kind, subclasses as their values, numpy-free Fractions, objects
// of the program's own (called, read, iterated), generators, exceptions the tests expect, lambdas
// from the tests, and the program's imports.
TEST(CodeVerifier, AssertJudgeSeesTheProgramsValuesAsPythonDoes) {
  const auto v = make_code_verifier(config(/*partial=*/true));
  const std::vector<std::string> tests = {
      "assert big(3) == 3 ** 3000 and big(-3) == -(3 ** 3000)",
      "r = special()\nassert r[0] != r[0] and r[1] == float('inf') and r[2] == -0.0 and r[3] == 1 + 2j",
      "assert mixed() == {'a': (1, [2, {3}]), 2: frozenset({4}), b'k': bytearray(b'v'), None: True}",
      "from fractions import Fraction\nfrom decimal import Decimal\nassert exact() == (Fraction(1, 3), Decimal('0.1'))",
      "from collections import OrderedDict\nassert ordered() == OrderedDict([(1, 2)]) == {1: 2}",
      "assert named() == (1, 2) and named()[1] == 2",
      "p = Point(3, 4)\nassert p.norm() == 5.0 and p.x == 3 and str(p) == 'P(3, 4)'",
      "assert list(count_up(3)) == [0, 1, 2] and 2 in count_up(3) and 5 not in count_up(3)",
      "try:\n    safe_div(1, 0)\n    assert False\nexcept ZeroDivisionError:\n    pass",
      "assert apply(lambda x: x * 10, [1, 2]) == [10, 20]",
      "assert uses_math(16) == 4.0 and math.sqrt(uses_math(81)) == 3.0",
      "assert len(Box([1, 2, 3])) == 3 and Box([1])[0] == 1",
      "assert Point(1, 1) == Point(1, 1) and Point(1, 1) != Point(2, 2)",
      "assert same(True) is True and same(None) is None and type(same(7)) is int"};
  const std::string program =
      "import math\nfrom collections import OrderedDict, namedtuple\nfrom fractions import Fraction\n"
      "from decimal import Decimal\n"
      "def big(x):\n    return x ** 3000 if x > 0 else -((-x) ** 3000)\n"
      "def special():\n    return [float('nan'), float('inf'), -0.0, 1 + 2j]\n"
      "def mixed():\n    return {'a': (1, [2, {3}]), 2: frozenset({4}), b'k': bytearray(b'v'), None: True}\n"
      "def exact():\n    return (Fraction(1, 3), Decimal('0.1'))\n"
      "def ordered():\n    return OrderedDict([(1, 2)])\n"
      "Pair = namedtuple('Pair', 'a b')\ndef named():\n    return Pair(1, 2)\n"
      "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
      "    def norm(self):\n        return math.hypot(self.x, self.y)\n"
      "    def __str__(self):\n        return 'P(%d, %d)' % (self.x, self.y)\n"
      "    def __eq__(self, o):\n        return (self.x, self.y) == (o.x, o.y)\n"
      "def count_up(n):\n    yield from range(n)\n"
      "def safe_div(a, b):\n    return a / b\n"
      "def apply(f, xs):\n    return [f(x) for x in xs]\n"
      "def uses_math(x):\n    return math.sqrt(x)\n"
      "class Box:\n    def __init__(self, items):\n        self.items = items\n"
      "    def __len__(self):\n        return len(self.items)\n"
      "    def __getitem__(self, k):\n        return self.items[k]\n"
      "def same(x):\n    return x\n";
  const RewardResult r = v->score(fenced(program), record({{"test_list", tests}}));
  EXPECT_EQ(r.status, RewardStatus::correct)
      << "passed " << r.extra.at("code_pass_frac") * tests.size() << " of " << tests.size();
}

}  // namespace
}  // namespace unstuck::reward

namespace unstuck::reward {
namespace {

// A job's folder goes whatever its depth (the old walk stopped at 64 levels and left 191 MiB behind):
// 3000 levels, read-only and unlistable folders, links to the outside, which are removed and never
// followed; the outside is untouched.
TEST(SandboxFolders, RemovedWhateverTheirDepthWithoutFollowingLinks) {
  const std::filesystem::path top =
      std::filesystem::temp_directory_path() / ("unstuck_deep_" + std::to_string(::getpid()));
  const std::filesystem::path outside = top.string() + "_outside";
  std::filesystem::remove_all(top);
  std::filesystem::create_directories(outside / "keep");
  std::ofstream(outside / "keep" / "file") << "mine";
  std::filesystem::create_directories(top);
  // Built through descriptors: a 3000-level path is longer than PATH_MAX.
  int fd = ::open(top.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  for (int level = 0; level < 3000; ++level) {
    ASSERT_EQ(::mkdirat(fd, "d", 0700), 0) << level;
    const int file = ::openat(fd, "f", O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(file, 0);
    ::close(file);
    if (level % 500 == 7) ASSERT_EQ(::symlinkat(outside.c_str(), fd, "link"), 0);
    const int next = ::openat(fd, "d", O_RDONLY | O_DIRECTORY);
    ASSERT_GE(next, 0);
    if (level % 700 == 3) ::fchmod(fd, 0500);  // read-only, once its entries are made
    if (level % 900 == 5) ::fchmod(fd, 0);     // not even listable
    ::close(fd);
    fd = next;
  }
  ::close(fd);
  remove_tree(top.string());
  EXPECT_FALSE(std::filesystem::exists(top));
  std::ifstream kept(outside / "keep" / "file");
  std::string text;
  kept >> text;
  EXPECT_EQ(text, "mine") << "a link inside was followed";
  std::filesystem::remove_all(outside);
}

}  // namespace
}  // namespace unstuck::reward
