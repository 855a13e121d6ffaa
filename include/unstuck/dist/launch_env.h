// Where a process stands in a multi-process run, read from the environment that torchrun, Slurm
// wrappers and `unstuck launch` set: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
// Without them the process is rank 0 of 1.
#pragma once

#include <string>

namespace unstuck::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;                     // rank on this machine (picks the GPU)
  std::string master_addr = "127.0.0.1";  // host of rank 0, which serves the rendezvous store
  int master_port = 29500;
};

// Reads the variables above. Throws UserError naming the variable when one is malformed, out of
// range (RANK >= WORLD_SIZE) or missing while WORLD_SIZE > 1 (MASTER_ADDR may default to loopback).
LaunchEnv launch_env_from_environment();

}  // namespace unstuck::dist
