// Error types. A UserError is a mistake the user can fix (config, file, CLI argument, checkpoint);
// its message names the thing to fix. The library throws; only main() prints and exits.
#pragma once

#include <stdexcept>
#include <string>

namespace unstuck {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A call given up because the user asked the run to stop (SIGINT/SIGTERM) while it waited (reward
// workers scoring): nothing of the call is kept, and the run ends at its last checkpoint.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace unstuck
