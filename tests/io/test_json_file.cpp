// JSON file helpers: round trip, and errors that name the file (and line/column for bad JSON).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"

namespace fs = std::filesystem;

namespace {

std::string error_of(const fs::path& path) {
  try {
    unstuck::io::read_json_file(path);
  } catch (const unstuck::UserError& e) {
    return e.what();
  }
  return "<no UserError>";
}

}  // namespace

TEST(JsonFile, RoundTripAndErrors) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_json_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const nlohmann::json config = {{"hidden_size", 64}, {"rope_theta", 10000.0}, {"architectures", {"LlamaForCausalLM"}}};
  unstuck::io::write_json_file(dir / "config.json", config);
  EXPECT_EQ(unstuck::io::read_json_file(dir / "config.json"), config);

  const std::string missing = (dir / "missing.json").string();
  EXPECT_NE(error_of(missing).find("JSON file '" + missing + "' not found"), std::string::npos);
  std::ofstream(dir / "bad.json") << "{\n  \"a\": 1,\n  oops\n}";
  const std::string bad = error_of(dir / "bad.json");
  const std::string expected = "malformed JSON in '" + (dir / "bad.json").string() + "': parse error at line 3";
  EXPECT_NE(bad.find(expected), std::string::npos) << bad;
  fs::remove_all(dir);
}
