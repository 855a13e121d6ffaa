// Every YAML file shipped in configs/ loads and validates: a config that drifts from the option
// structs (renamed key, bad value) fails here rather than in a user's run.
#include <gtest/gtest.h>

#include <filesystem>

#include "unstuck/config/run_config.h"

namespace unstuck {
namespace {

TEST(ShippedConfigs, AllLoadAndValidate) {
  int count = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(UNSTUCK_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(load_run_config(e.path())) << e.path();
    ++count;
  }
  EXPECT_GE(count, 8);
}

}  // namespace
}  // namespace unstuck
