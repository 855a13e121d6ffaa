// Distributed faults (issue 14): a frozen rank is named and killed at once (no wait for the whole
// grace period), a killed rank and a port already in use are reported in one line naming the rank
// or the port.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>

#include "faults/fault_util.h"
#include "unstuck/dist/launcher.h"

namespace unstuck::faults {
namespace {

dist::LaunchOptions two_ranks(const std::string& script) {
  dist::LaunchOptions o;
  o.command = {"/bin/sh", "-c", script};
  o.nproc = 2;
  o.grace_s = 30;
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Rank 1 freezes (SIGSTOP), rank 0 gives up waiting for it: the launcher names rank 1 as the cause
// and kills it at once instead of waiting grace_s (30 s) for a SIGTERM it cannot act on.
TEST(LauncherFaults, FrozenRankIsNamedAndKilledAtOnce) {
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  const int code = dist::launch_local(
      two_ranks("if [ \"$RANK\" = 1 ]; then kill -STOP $$; sleep 60; else sleep 1; exit 3; fi"), log);
  EXPECT_EQ(code, 3);
  EXPECT_LT(seconds_since(t0), 15.0) << "waited for the grace period: " << log.str();
  EXPECT_NE(log.str().find("rank 1 (pid"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("is frozen (stopped by signal"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("launch: rank 0 (pid"), std::string::npos) << log.str();
}

TEST(LauncherFaults, KilledRankIsOneLine) {
  std::ostringstream log;
  const int code = dist::launch_local(two_ranks("if [ \"$RANK\" = 0 ]; then kill -KILL $$; else sleep 60; fi"), log);
  const std::string out = log.str();
  EXPECT_EQ(code, 128 + 9);
  EXPECT_EQ(out.rfind("launch: rank 0 (pid", 0), 0u) << out;
  EXPECT_NE(out.find("was killed by signal 9"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

// A rank 0 whose MASTER_PORT is taken says so in one line naming the port (not a timeout, not a
// backtrace).
TEST(LauncherFaults, PortInUseIsNamed) {
  ScratchDir dir;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  const fs::path log = dir.path / "log.txt";
  const std::string command =
      "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " '" +
      UNSTUCK_BINARY + "' train --config '" + UNSTUCK_SOURCE_DIR +
      "/configs/grpo/countdown.yaml' dist.timeout_s=5 > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  ::close(fd);
  const std::string out = read_file(log);
  EXPECT_NE(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("port " + std::to_string(port) + " (MASTER_PORT) is already in use"), std::string::npos) << out;
  EXPECT_EQ(out.find("frame #"), std::string::npos) << "a backtrace: " << out;
  EXPECT_LE(std::count(out.begin(), out.end(), '\n'), 2) << out;
}

}  // namespace
}  // namespace unstuck::faults
