// Logging setup: spdlog's default logger with a console sink (stderr) and, for a run, a file sink
// in the run directory. Code logs with spdlog::info(...) etc. in .cpp files; this header keeps
// spdlog out of the public interface.
#pragma once

#include <array>
#include <filesystem>
#include <utility>

namespace unstuck {

enum class LogLevel { trace, debug, info, warn, error };

inline constexpr std::array<std::pair<LogLevel, const char*>, 5> kLogLevelNames{{
    {LogLevel::trace, "trace"},
    {LogLevel::debug, "debug"},
    {LogLevel::info, "info"},
    {LogLevel::warn, "warn"},
    {LogLevel::error, "error"},
}};
constexpr const auto& enum_names(LogLevel) { return kLogLevelNames; }

// Replaces spdlog's default logger: messages at `level` and above go to stderr and, when `log_file`
// is not empty, are appended to that file (its folder is created). Throws UserError when the file
// cannot be opened.
void setup_logging(LogLevel level, const std::filesystem::path& log_file = {});

}  // namespace unstuck
