// read_json_file / write_json_file: nlohmann::json plus file handling and messages that say which
// file is wrong and where.
#include "unstuck/io/json_file.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "unstuck/common/error.h"
#include "unstuck/io/atomic_file.h"

namespace unstuck::io {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw UserError("JSON file '" + path.string() + "' not found");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw UserError("cannot read JSON file '" + path.string() + "'");
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 3, column 5: ...".
    std::string why = e.what();
    const auto at = why.find("] ");
    if (at != std::string::npos) why = why.substr(at + 2);
    throw UserError("malformed JSON in '" + path.string() + "': " + why);
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
