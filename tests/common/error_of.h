// Test helper: the message of the UserError that `f` throws, so a test can assert the exact error a
// bad input gets; "(no error)" when it throws none.
#pragma once

#include <functional>
#include <string>

#include "unstuck/common/error.h"

namespace unstuck::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace unstuck::testing
