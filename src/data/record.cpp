// TaskRecord <-> JSON, and JSONL files of records with "file:line: ..." errors for bad lines.
#include "unstuck/data/record.h"

#include <fstream>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"

namespace unstuck::data {
namespace {

const char* kRequiredKeys[] = {"task", "prompt", "answer"};

template <class Json>
std::string required_string(const Json& object, const char* key, bool number_ok) {
  const auto it = object.find(key);
  if (it == object.end()) throw UserError(std::string("missing key '") + key + "'");
  if (it->is_string()) return it->template get<std::string>();
  if (number_ok && it->is_number()) return it->dump();
  throw UserError(std::string("'") + key + "' must be a string" + (number_ok ? " or a number" : "") + ", got " +
                  it->type_name());
}

template <class Json>
TaskRecord from_object(const Json& object) {
  if (!object.is_object()) {
    throw UserError(std::string("expected a JSON object, got ") + object.type_name());
  }
  TaskRecord record;
  record.task = required_string(object, "task", false);
  record.prompt = required_string(object, "prompt", false);
  record.answer = required_string(object, "answer", true);
  if (record.task.empty()) throw UserError("'task' must not be empty");
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool required = false;
    for (const char* key : kRequiredKeys) required = required || it.key() == key;
    if (!required) record.fields[it.key()] = nlohmann::json(it.value());
  }
  return record;
}

}  // namespace

nlohmann::ordered_json record_to_json(const TaskRecord& record) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["task"] = record.task;
  out["prompt"] = record.prompt;
  out["answer"] = record.answer;
  if (record.fields.is_object()) {
    for (auto it = record.fields.begin(); it != record.fields.end(); ++it) {
      out[it.key()] = nlohmann::ordered_json(it.value());
    }
  }
  return out;
}

TaskRecord record_from_json(const nlohmann::json& object) { return from_object(object); }
TaskRecord record_from_json(const nlohmann::ordered_json& object) { return from_object(object); }

void to_json(nlohmann::json& out, const TaskRecord& record) { out = nlohmann::json(record_to_json(record)); }

void from_json(const nlohmann::json& in, TaskRecord& record) { record = record_from_json(in); }

nlohmann::ordered_json parse_json_line(const std::string& line, const std::string& where) {
  return io::parse_ordered_json(line, where);  // depth cap, "<where>: invalid JSON: column 3: ..."
}

TaskRecord parse_record_line(const std::string& line, const std::string& where) {
  const nlohmann::ordered_json object = parse_json_line(line, where);
  try {
    return record_from_json(object);
  } catch (const UserError& e) {
    throw UserError(where + ": " + e.what());
  }
}

std::vector<TaskRecord> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw UserError("cannot open '" + path.string() + "' (a JSONL file of task records)");
  std::vector<TaskRecord> records;
  std::string line;
  for (long long number = 0; io::read_capped_line(in, line, io::kMaxJsonlLineBytes, path.string(), number);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    records.push_back(parse_record_line(line, path.string() + ":" + std::to_string(number)));
  }
  return records;
}

void write_jsonl(const std::filesystem::path& path, const std::vector<TaskRecord>& records) {
  if (path.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
  }
  std::ofstream out(path);
  if (!out) throw UserError("cannot write '" + path.string() + "'");
  for (const TaskRecord& record : records) out << record_to_json(record).dump() << "\n";
  out.flush();
  if (!out) throw UserError("failed writing '" + path.string() + "' (disk full?)");
}

}  // namespace unstuck::data
