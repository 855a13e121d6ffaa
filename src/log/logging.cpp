// setup_logging(): spdlog's default logger with a colored stderr sink and an optional append-mode
// file sink (the run's log). It is the one global the project allows.
#include "unstuck/log/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <vector>

#include "unstuck/common/error.h"

namespace unstuck {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

void setup_logging(LogLevel level, const std::filesystem::path& log_file) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!log_file.empty()) {
    try {
      // Append, so a resumed run keeps the log of its earlier segments. spdlog creates the folder.
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file.string(), false));
    } catch (const spdlog::spdlog_ex& e) {
      throw UserError("cannot open log file " + log_file.string() + ": " + e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("unstuck", sinks.begin(), sinks.end());
  logger->set_level(to_spdlog(level));
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace unstuck
