// read_json_file / write_json_file and parse_json: nlohmann::json plus file handling, a nesting-depth
// cap, and messages that say which file (and line) is wrong and where.
#include "unstuck/io/json_file.h"

#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "unstuck/common/error.h"
#include "io/atomic_file.h"

namespace unstuck::io {
namespace {

// nlohmann's what() reads "[json.exception.parse_error.101] parse error at line 1, column 3: ...";
// keep what follows the tag, and drop "line 1, " for one-line texts (the caller's `where` names the
// real line).
std::string json_error_text(const std::string& what, bool single_line) {
  std::string text = what;
  const auto tag = text.find("] ");
  if (tag != std::string::npos) text = text.substr(tag + 2);
  if (single_line) {
    const std::string line1 = "parse error at line 1, ";
    const auto at = text.find(line1);
    if (at != std::string::npos) text = text.substr(at + line1.size());
  }
  return text;
}

template <class Json>
Json parse_any(std::string_view text, const std::string& where) {
  check_json_depth(text, where);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, out_of_range (1e400), ...
    throw UserError(where + ": invalid JSON: " + json_error_text(e.what(), text.find('\n') == std::string_view::npos));
  }
}

}  // namespace

void check_json_depth(std::string_view text, const std::string& where) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw UserError(where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels (arrays/objects inside each other); not a data record");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& where) {
  return parse_any<nlohmann::json>(text, where);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where) {
  return parse_any<nlohmann::ordered_json>(text, where);
}

bool read_capped_line(std::istream& in, std::string& line, std::size_t max_bytes, const std::string& where,
                      long long& line_number) {
  line.clear();
  std::streambuf* buf = in.rdbuf();
  if (!buf) return false;
  bool any = false;
  for (;;) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      if (any) ++line_number;
      return any;
    }
    any = true;
    if (c == '\n') {
      ++line_number;
      return true;
    }
    if (line.size() >= max_bytes)
      throw UserError(where + ":" + std::to_string(line_number + 1) + ": line longer than " +
                      std::to_string(max_bytes) + " bytes (is this a JSONL file?)");
    line.push_back(char(c));
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw UserError("JSON file '" + path.string() + "' not found");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw UserError("cannot read JSON file '" + path.string() + "'");
  const std::string where = "malformed JSON in '" + path.string() + "'";
  check_json_depth(text.str(), where);
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw UserError(where + ": " + json_error_text(e.what(), false));
  }
}

void write_json_file(const std::filesystem::path& path, const nlohmann::json& value, int indent) {
  std::string text;
  try {
    text = value.dump(indent) + "\n";
  } catch (const nlohmann::json::type_error& e) {  // invalid UTF-8 in a string
    throw UserError("cannot write '" + path.string() + "': " + e.what());
  }
  AtomicFileWriter file(path);
  file.write(text);
  file.commit();
}

}  // namespace unstuck::io
