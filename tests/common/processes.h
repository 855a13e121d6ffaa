// Counting the processes a test left behind: those whose command line holds a token the test gave
// them, waited on for up to a second (a killed process takes a moment to go).
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace unstuck::testing {

inline int processes_with(const std::string& token) {
  int found = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    found = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::ifstream in(entry.path() / "cmdline", std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find(token) != std::string::npos) ++found;
    }
    if (found == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return found;
}

}  // namespace unstuck::testing
