// JSON files (HF config.json, run metadata) read and written as nlohmann::json, with errors that
// name the file. Writes are atomic (AtomicFileWriter). Every JSON reader of the project parses
// through parse_json() here, which caps nesting depth (nlohmann's parser and its value copies recurse
// per level: a 100,000-deep `[[[...]]]` overflows the stack) and turns every nlohmann exception
// (syntax, number overflow such as 1e400) into a UserError naming where the text came from.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <string_view>

namespace unstuck::io {

// Deepest nesting of arrays/objects accepted in any JSON text.
constexpr std::size_t kMaxJsonDepth = 512;
// Longest line accepted from a JSONL file (64 MiB); a longer one is not a record.
constexpr std::size_t kMaxJsonlLineBytes = std::size_t(64) << 20;

// Parses `text` (one JSON value). `where` names its origin ("file:line", "'path'") and starts every
// error: "<where>: invalid JSON: column 3: syntax error ...", "<where>: JSON nested deeper than 512
// levels", "<where>: invalid JSON: number overflow parsing '1e400'". Throws UserError.
nlohmann::json parse_json(std::string_view text, const std::string& where);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where);

// Throws UserError "<where>: JSON nested deeper than kMaxJsonDepth levels" (a linear scan that
// skips strings), so a hostile text is refused before any recursive code sees it.
void check_json_depth(std::string_view text, const std::string& where);

// Reads the next line of `in` into `line` (without the newline); false at the end of the input.
// Throws UserError "<where>:<line number>: line longer than N bytes" instead of reading an
// endless line (e.g. /dev/zero) into memory. `line_number` is incremented per line read.
bool read_capped_line(std::istream& in, std::string& line, std::size_t max_bytes, const std::string& where,
                      long long& line_number);

// Parses `path`. Throws UserError naming the file when it is missing or unreadable, or naming the
// file, line and column when it is not valid JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Writes `value` to `path` followed by a newline, indented by `indent` spaces (-1: one line).
void write_json_file(const std::filesystem::path& path, const nlohmann::json& value, int indent = 2);

}  // namespace unstuck::io
