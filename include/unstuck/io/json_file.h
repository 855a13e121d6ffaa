// JSON files (HF config.json, run metadata) read and written as nlohmann::json, with errors that
// name the file. Writes are atomic (AtomicFileWriter).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <filesystem>

namespace unstuck::io {

// Parses `path`. Throws UserError naming the file when it is missing or unreadable, or naming the
// file, line and column when it is not valid JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Writes `value` to `path` followed by a newline, indented by `indent` spaces (-1: one line).
void write_json_file(const std::filesystem::path& path, const nlohmann::json& value,
                     int indent = 2);

}  // namespace unstuck::io
