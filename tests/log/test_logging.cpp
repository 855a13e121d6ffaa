// setup_logging(): the level filters messages, the file sink appends to the run's log file
// (creating its folder), and an unwritable log path is a UserError naming the file.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/log/logging.h"

namespace unstuck {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Logging, FileSinkHonoursTheLevelAndAppends) {
  const fs::path dir = fs::temp_directory_path() / "unstuck_test_logging";
  fs::remove_all(dir);
  const fs::path file = dir / "logs" / "run.log";
  setup_logging(LogLevel::warn, file);
  spdlog::info("hidden message");
  spdlog::warn("shown message {}", 1);
  setup_logging(LogLevel::debug, file);
  spdlog::debug("second segment");
  setup_logging(LogLevel::info);  // releases the file
  const std::string text = read_file(file);
  EXPECT_EQ(text.find("hidden message"), std::string::npos) << text;
  EXPECT_NE(text.find("[warning] shown message 1"), std::string::npos) << text;
  EXPECT_NE(text.find("[debug] second segment"), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST(Logging, UnopenableFileIsAUserError) {
  const fs::path dir = fs::temp_directory_path() / "unstuck_test_logging_dir";
  fs::create_directories(dir);
  try {
    setup_logging(LogLevel::info, dir);  // a folder, not a file
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot open log file " + dir.string() + ": ", 0), 0u) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unstuck
