// Field mapping from arbitrary JSONL lines (GSM8K, MATH, verl) to TaskRecords, and the reference
// answer extraction (GSM8K's "####", MATH's last \boxed{}).
#include "unstuck/data/dataset.h"

#include <fstream>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/common/value_names.h"
#include "unstuck/reward/answer.h"

namespace unstuck::data {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string answer_text(const nlohmann::ordered_json& value, const std::string& key) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number()) return value.dump();
  throw UserError("data.answer_key '" + key + "' must be a string or a number, got " + value.type_name());
}

}  // namespace

const nlohmann::ordered_json* find_path(const nlohmann::ordered_json& object, const std::string& path) {
  const nlohmann::ordered_json* at = &object;
  size_t from = 0;
  while (true) {
    const size_t dot = path.find('.', from);
    const std::string part = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    if (at->is_object()) {
      const auto it = at->find(part);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array() && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos) {
      const size_t index = std::stoul(part);
      if (index >= at->size()) return nullptr;
      at = &(*at)[index];
    } else {
      return nullptr;
    }
    if (dot == std::string::npos) return at;
    from = dot + 1;
  }
}

std::optional<std::string> extract_reference(const std::string& text, AnswerExtraction how) {
  // The same readers the verifiers apply to completions (reward/answer.h), so a reference and a
  // completion written alike extract alike.
  switch (how) {
    case AnswerExtraction::gsm8k:
      return reward::extract_answer(text, reward::AnswerFormat::hashes);
    case AnswerExtraction::boxed:
      return reward::extract_answer(text, reward::AnswerFormat::boxed);
    case AnswerExtraction::none:
      break;
  }
  std::string out = trim(text);
  if (out.empty()) return std::nullopt;
  return out;
}

TaskRecord record_from_mapping(const nlohmann::ordered_json& object, const DataConfig& config) {
  if (!object.is_object()) throw UserError(std::string("expected a JSON object, got ") + object.type_name());
  TaskRecord record;
  const auto task = object.find("task");
  record.task = task != object.end() && task->is_string() ? task->get<std::string>() : enum_name(config.task);

  const nlohmann::ordered_json* prompt = find_path(object, config.prompt_key);
  if (!prompt) throw UserError("missing data.prompt_key '" + config.prompt_key + "'");
  if (prompt->is_string()) {
    record.prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && !prompt->empty()) {
    for (size_t k = 0; k < prompt->size(); ++k) {
      const auto& m = (*prompt)[k];
      const std::string where = "data.prompt_key '" + config.prompt_key + "' message " + std::to_string(k);
      if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
          !m["content"].is_string())
        throw UserError(where + ": expected {\"role\": string, \"content\": string}");
      record.messages.push_back({{"role", m["role"].get<std::string>()}, {"content", m["content"].get<std::string>()}});
      if (m["role"] == "user") record.prompt = m["content"].get<std::string>();
    }
  } else {
    throw UserError("data.prompt_key '" + config.prompt_key +
                    "' must be a string or a non-empty list of messages, got " +
                    (prompt->is_array() ? std::string("an empty list") : std::string(prompt->type_name())));
  }

  const nlohmann::ordered_json* answer = find_path(object, config.answer_key);
  if (!answer) throw UserError("missing data.answer_key '" + config.answer_key + "'");
  const std::optional<std::string> reference =
      extract_reference(answer_text(*answer, config.answer_key), config.answer_extraction);
  if (!reference) {
    const std::string what = config.answer_extraction == AnswerExtraction::gsm8k   ? "no '####' followed by an answer"
                             : config.answer_extraction == AnswerExtraction::boxed ? "no complete \\boxed{...}"
                                                                                   : "a blank answer";
    throw UserError("data.answer_key '" + config.answer_key + "': " + what +
                    " (data.answer_extraction: " + enum_name(config.answer_extraction) + ")");
  }
  record.answer = *reference;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (it.key() != "task" && it.key() != "prompt" && it.key() != "answer")
      record.fields[it.key()] = nlohmann::json(it.value());
  }
  return record;
}

std::vector<TaskRecord> read_dataset(const std::filesystem::path& path, const DataConfig& config) {
  std::ifstream in(path);
  if (!in) throw UserError("cannot open '" + path.string() + "' (a JSONL dataset)");
  std::vector<TaskRecord> records;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(number);
    const nlohmann::ordered_json object = parse_json_line(line, where);
    try {
      records.push_back(record_from_mapping(object, config));
    } catch (const UserError& e) {
      throw UserError(where + ": " + e.what());
    }
  }
  return records;
}

}  // namespace unstuck::data
