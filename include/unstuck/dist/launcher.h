// `unstuck launch`: starts the ranks of a run on this machine the way torchrun does (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in each rank's environment), forwards SIGINT and
// SIGTERM to them, and stops all of them when one fails.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace unstuck::dist {

struct LaunchOptions {
  std::vector<std::string> command;        // program and arguments run by every rank
  int nproc = 1;                           // ranks on this machine
  int nnodes = 1;                          // machines in the run
  int node_rank = 0;                       // this machine's index; its ranks are node_rank * nproc + i
  std::string master_addr = "127.0.0.1";   // host of global rank 0
  int master_port = 0;                     // 0: a free port (single machine only)
  double grace_s = 30;                     // after SIGTERM, seconds before the remaining ranks get SIGKILL
  std::map<std::string, std::string> env;  // extra environment of every rank
};

// Runs the ranks to completion. Returns 0 when all exit 0; otherwise the exit status of the first
// rank that failed (128 + signal when it was killed), after stopping the others (SIGTERM, then
// SIGKILL after grace_s). Writes one line per failure to `log`, naming the rank.
int launch_local(const LaunchOptions& options, std::ostream& log);

// A TCP port that was free a moment ago on the loopback interface.
int free_tcp_port();

}  // namespace unstuck::dist
