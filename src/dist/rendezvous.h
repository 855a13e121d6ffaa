// Rendezvous shared by the Gloo and NCCL backends: the TCP store served by rank 0 at
// MASTER_ADDR:MASTER_PORT, and the roll call that names the ranks that died or hang after a
// collective failed.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <exception>
#include <string>

#include "unstuck/dist/launch_env.h"

namespace unstuck::dist {

// The first line of an exception's message, without the C++ backtrace c10 errors carry, so a
// failure prints one readable line.
std::string short_error(const std::exception& e);

// Rank 0 serves the store, the others connect (waiting up to `timeout_s`). Throws PeerFailure
// naming the address when the store cannot be reached in time.
c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& env, double timeout_s);

// After `what` failed with `error`: every surviving rank writes its name into the store and waits
// (up to `wait_s`) for the others; returns the PeerFailure message naming the ranks that did not
// answer, or rank 0 when the store itself is gone.
std::string roll_call(c10d::Store& store, const LaunchEnv& env, const std::string& what, const std::string& error,
                      double wait_s);

}  // namespace unstuck::dist
