// Datasets of any JSONL layout: a field mapping (data.prompt_key, data.answer_key with dotted
// paths, data.answer_extraction) turns GSM8K, MATH and verl-style lines into TaskRecords. Records
// written by `unstuck data generate` load unchanged with the default mapping.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "unstuck/data/data_config.h"
#include "unstuck/data/record.h"

namespace unstuck::data {

// The value at a dotted path ("reward_model.ground_truth"; a list element by index: "a.0.b"), or
// nullptr when a part is missing.
const nlohmann::ordered_json* find_path(const nlohmann::ordered_json& object, const std::string& path);

// The reference answer inside `text` by `how`: gsm8k "Natalia ... #### 72" -> "72"; boxed
// "... so \boxed{\frac{1}{2}}." -> "\frac{1}{2}"; none -> text. nullopt when the marker is absent
// or the answer is blank.
std::optional<std::string> extract_reference(const std::string& text, AnswerExtraction how);

// One JSONL object as a record under `config`'s mapping. task: the line's "task" string, else
// data.task. prompt: prompt_key's string, or its message list (each {role, content} strings; kept
// in `messages`, `prompt` = the last user message). answer: answer_key's string or number after
// answer_extraction. Every other top-level key is a field. Throws UserError naming the key
// ("data.answer_key 'solution': no \boxed{...} in the answer"); the caller adds file:line.
TaskRecord record_from_mapping(const nlohmann::ordered_json& object, const DataConfig& config);

// Every non-blank line of a JSONL file through record_from_mapping(); errors are "file:line: ...".
std::vector<TaskRecord> read_dataset(const std::filesystem::path& path, const DataConfig& config);

}  // namespace unstuck::data
