// One task instance (a prompt with a verifiable answer) and its JSONL form:
//   {"task": "countdown", "prompt": "Use 3 5 7 to make 22:", "answer": "3*5+7",
//    "numbers": [3, 5, 7], "target": 22}
// task, prompt and answer are required; every other key is a task field kept in `fields`.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace unstuck::data {

struct TaskRecord {
  std::string task;                                  // verifier / generator name: arithmetic, countdown, math
  std::string prompt;                                // the problem text, e.g. "12+35="
  std::string answer;                                // what a correct completion puts in <answer>...</answer>
  nlohmann::json fields = nlohmann::json::object();  // task extras: numbers, target, ...
  // The prompt as chat messages ([{"role", "content"}], verl-style records); empty when the
  // prompt is plain text. `prompt` then holds the last user message.
  nlohmann::json messages = nlohmann::json::array();
};

// The record as one flat JSON object: task, prompt, answer first, then the fields (sorted).
nlohmann::ordered_json record_to_json(const TaskRecord& record);
// Reads a record from a JSON object. A numeric "answer" is accepted and kept as its text. Throws
// UserError ("missing key 'prompt'", "'task' must be a string, got number") without a location;
// callers prefix it.
TaskRecord record_from_json(const nlohmann::json& object);
// The same for any JSON type that nlohmann converts (ordered_json).
TaskRecord record_from_json(const nlohmann::ordered_json& object);

// nlohmann's conversion hooks, so `json(record)` and `j.get<TaskRecord>()` work.
void to_json(nlohmann::json& out, const TaskRecord& record);
void from_json(const nlohmann::json& in, TaskRecord& record);

// Parses one JSONL line as a JSON value (key order kept); throws UserError "<where>: invalid JSON:
// column 3: syntax error ..." where `where` is "file:line".
nlohmann::ordered_json parse_json_line(const std::string& line, const std::string& where);
// Parses one JSONL line as a record; `where` ("file:line") prefixes every error message.
TaskRecord parse_record_line(const std::string& line, const std::string& where);
// Every non-blank line of a JSONL file. Throws UserError "file:line: ..." on a malformed line or a
// missing key, and "cannot open 'file'" when the file cannot be read.
std::vector<TaskRecord> read_jsonl(const std::filesystem::path& path);
// Writes one record per line (creating parent folders); throws UserError when it cannot write.
void write_jsonl(const std::filesystem::path& path, const std::vector<TaskRecord>& records);

}  // namespace unstuck::data
