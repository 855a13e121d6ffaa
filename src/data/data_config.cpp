// DataConfig checks, the default dataset paths, and the prompt / completion templates that turn a
// TaskRecord into the text the model sees ({prompt}, {answer}, {task}, {<field>}).
#include "unstuck/data/data_config.h"

#include <string>

#include "unstuck/common/error.h"
#include "unstuck/common/value_names.h"

namespace unstuck::data {
namespace {

void check_range(const std::string& key, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    throw UserError(key + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                    std::to_string(value));
  }
}

void check_order(const std::string& lo_key, int64_t lo, const std::string& hi_key, int64_t hi) {
  if (lo > hi) {
    throw UserError(lo_key + " (" + std::to_string(lo) + ") must be <= " + hi_key + " (" + std::to_string(hi) + ")");
  }
}

// Text of a task field inside a template: strings bare, lists joined by spaces, others as JSON.
std::string field_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string out;
    for (const auto& element : value) {
      if (!out.empty()) out += ' ';
      out += field_text(element);
    }
    return out;
  }
  return value.dump();
}

std::string placeholder_names(const TaskRecord& record) {
  std::string names = "prompt, answer, task";
  if (record.fields.is_object()) {
    for (auto it = record.fields.begin(); it != record.fields.end(); ++it) names += ", " + it.key();
  }
  return names;
}

}  // namespace

void validate(const DataConfig& config, const std::string& prefix) {
  const std::string p = prefix.empty() ? "" : prefix + ".";
  if (!(config.test_fraction >= 0.0 && config.test_fraction < 1.0)) {
    throw UserError(p + "test_fraction must be in [0, 1), got " + format_double(config.test_fraction));
  }
  if (config.prompt_key.empty()) throw UserError(p + "prompt_key must name a record key, e.g. prompt or question");
  if (config.answer_key.empty()) throw UserError(p + "answer_key must name a record key, e.g. answer or solution");
  if (config.chat_template.empty())
    throw UserError(p + "chat_template must be auto, none or a .jinja file, got an empty string");
  const ArithmeticOptions& a = config.arithmetic;
  check_range(p + "arithmetic.min_digits", a.min_digits, 1, 9);
  check_range(p + "arithmetic.max_digits", a.max_digits, 1, 9);
  check_order(p + "arithmetic.min_digits", a.min_digits, p + "arithmetic.max_digits", a.max_digits);
  if (a.ops.empty()) throw UserError(p + "arithmetic.ops must name at least one of: add, mul");
  for (const std::string& op : a.ops) {
    if (op != "add" && op != "mul") {
      throw UserError(p + "arithmetic.ops: unknown op '" + op + "' (known: add, mul)");
    }
  }
  const CountdownOptions& c = config.countdown;
  check_range(p + "countdown.count", c.count, 2, 6);
  check_range(p + "countdown.min_number", c.min_number, 1, 1000);
  check_range(p + "countdown.max_number", c.max_number, 1, 1000);
  check_order(p + "countdown.min_number", c.min_number, p + "countdown.max_number", c.max_number);
  check_range(p + "countdown.min_target", c.min_target, 0, 1000000);
  check_range(p + "countdown.max_target", c.max_target, 0, 1000000);
  check_order(p + "countdown.min_target", c.min_target, p + "countdown.max_target", c.max_target);
}

std::filesystem::path train_file(const DataConfig& config) {
  if (!config.train_path.empty()) return config.train_path;
  return std::filesystem::path("data") / enum_name(config.task) / "train.jsonl";
}

std::filesystem::path test_file(const DataConfig& config) {
  if (!config.test_path.empty()) return config.test_path;
  return std::filesystem::path("data") / enum_name(config.task) / "test.jsonl";
}

std::string fill_template(const std::string& text, const TaskRecord& record, const std::string& template_name) {
  std::string out;
  out.reserve(text.size() + record.prompt.size() + record.answer.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      out += c;  // "{{" or "}}": a literal brace
      ++i;
      continue;
    }
    if (c == '}') {
      throw UserError(template_name + ": unmatched '}' at position " + std::to_string(i) +
                      " (write '}}' for a literal brace)");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = text.find('}', i + 1);
    if (close == std::string::npos) {
      throw UserError(template_name + ": unclosed '{' at position " + std::to_string(i) +
                      " (write '{{' for a literal brace)");
    }
    const std::string name = text.substr(i + 1, close - i - 1);
    if (name == "prompt") {
      out += record.prompt;
    } else if (name == "answer") {
      out += record.answer;
    } else if (name == "task") {
      out += record.task;
    } else if (record.fields.is_object() && record.fields.contains(name)) {
      out += field_text(record.fields.at(name));
    } else {
      throw UserError(template_name + ": unknown placeholder {" + name + "} (record has: " + placeholder_names(record) +
                      ")");
    }
    i = close;
  }
  return out;
}

std::string format_prompt(const TaskRecord& record, const DataConfig& config) {
  return fill_template(config.prompt_template, record, "data.prompt_template");
}

std::string format_completion(const TaskRecord& record, const DataConfig& config) {
  return fill_template(config.completion_template, record, "data.completion_template");
}

}  // namespace unstuck::data
