// Options of the data component: which synthetic task a run trains on, where its JSONL splits
// live, how a record becomes a prompt and an SFT completion (templates), and the generators'
// knobs. Header-only options (visit() for the config code) plus the template functions.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "unstuck/data/record.h"

namespace unstuck::data {

// What a dataset's records are (docs/TASKS.md): the synthetic tasks this project generates
// (arithmetic, countdown), math word problems (GSM8K, MATH, verl-style records) or programming
// problems with tests (MBPP, HumanEval, APPS-style records); the last two have no generator.
enum class TaskKind { arithmetic, countdown, math, code };

inline constexpr std::array<std::pair<TaskKind, const char*>, 4> kTaskKindNames{{
    {TaskKind::arithmetic, "arithmetic"},
    {TaskKind::countdown, "countdown"},
    {TaskKind::math, "math"},
    {TaskKind::code, "code"},
}};
constexpr const auto& enum_names(TaskKind) { return kTaskKindNames; }

// How the reference answer is read out of a record's answer field.
enum class AnswerExtraction {
  none,   // the field as it is
  gsm8k,  // the text after the last "####" of a GSM8K solution
  boxed,  // the content of the last \boxed{...} of a MATH solution (nested braces)
};

inline constexpr std::array<std::pair<AnswerExtraction, const char*>, 3> kAnswerExtractionNames{{
    {AnswerExtraction::none, "none"},
    {AnswerExtraction::gsm8k, "gsm8k"},
    {AnswerExtraction::boxed, "boxed"},
}};
constexpr const auto& enum_names(AnswerExtraction) { return kAnswerExtractionNames; }

// Arithmetic: "a+b=" / "a*b=" with each operand's digit count uniform in [min_digits, max_digits].
struct ArithmeticOptions {
  int min_digits = 1;                          // fewest digits of an operand (1 means 0..9)
  int max_digits = 3;                          // most digits of an operand
  std::vector<std::string> ops{"add", "mul"};  // operations drawn uniformly: add, mul

  template <class V>
  void visit(V& v) {
    v("min_digits", min_digits, "fewest digits of an operand (1: 0..9, 2: 10..99, ...)");
    v("max_digits", max_digits, "most digits of an operand (at most 9)");
    v("ops", ops, "operations, drawn uniformly: add (a+b), mul (a*b)");
  }
};

// Countdown: `count` numbers and a target reachable with + - * / using each number exactly once.
struct CountdownOptions {
  int count = 3;         // numbers per instance
  int min_number = 1;    // smallest given number
  int max_number = 30;   // largest given number
  int min_target = 1;    // smallest target
  int max_target = 100;  // largest target

  template <class V>
  void visit(V& v) {
    v("count", count, "numbers per instance (2..6), each to be used exactly once");
    v("min_number", min_number, "smallest given number (>= 1)");
    v("max_number", max_number, "largest given number (at most 1000)");
    v("min_target", min_target, "smallest target (>= 0)");
    v("max_target", max_target, "largest target (at most 1000000)");
  }
};

struct DataConfig {
  TaskKind task = TaskKind::arithmetic;                           // which task (and default verifier) the run uses
  std::string train_path;                                         // JSONL; empty = data/<task>/train.jsonl
  std::string test_path;                                          // JSONL; empty = data/<task>/test.jsonl
  std::string prompt_key = "prompt";                              // record key of the prompt: text or a message list
  std::string answer_key = "answer";                              // dotted path of the reference answer
  AnswerExtraction answer_extraction = AnswerExtraction::none;    // gsm8k, boxed or none
  std::string chat_template = "none";                             // auto (the model's), none, or a .jinja file
  std::string system_prompt;                                      // system message put first with a chat template
  std::string prompt_template = "{prompt}";                       // what the model is given
  std::string completion_template = "<answer>{answer}</answer>";  // SFT target after the prompt
  double test_fraction = 0.1;                                     // share of the problem space reserved for test
  ArithmeticOptions arithmetic;                                   // generator options of the arithmetic task
  CountdownOptions countdown;                                     // generator options of the countdown task

  template <class V>
  void visit(V& v) {
    v("task", task,
      "task of the records: arithmetic (a+b=, a*b=), countdown (make a target), math (word "
      "problems: GSM8K, MATH, verl) or code (programs with tests: MBPP, HumanEval, APPS); picks the "
      "verifier unless reward.verifier is set");
    v("train_path", train_path, "training JSONL; empty: data/<task>/train.jsonl");
    v("test_path", test_path, "evaluation JSONL; empty: data/<task>/test.jsonl");
    v("prompt_key", prompt_key,
      "dotted key of a record's prompt: a string (GSM8K question, MATH problem) or a list of "
      "{role, content} messages (verl's prompt)");
    v("answer_key", answer_key, "dotted key of the reference answer, e.g. answer, solution, reward_model.ground_truth");
    v("answer_extraction", answer_extraction,
      "how the reference answer is read from answer_key: none (as is), gsm8k (after the last "
      "####), boxed (the last \\boxed{...})");
    v("chat_template", chat_template,
      "none (prompt_template text after BOS), auto (the chat template of the tokenizer's model "
      "directory: chat_template.jinja or tokenizer_config.json) or a .jinja file");
    v("system_prompt", system_prompt,
      "with a chat template: a system message put before each record's messages (unless the "
      "record has its own); empty: none");
    v("prompt_template", prompt_template,
      "prompt text (with a chat template: the user message); {prompt}, {answer}, {task} and any "
      "task field, e.g. {target}");
    v("completion_template", completion_template,
      "SFT completion; same placeholders; must end in <answer>...</answer> for the verifiers");
    v("test_fraction", test_fraction,
      "share of the problem space (by hash) and of generated records that go to the test split");
    v("arithmetic", arithmetic, "generator options of the arithmetic task");
    v("countdown", countdown, "generator options of the countdown task");
  }
};

// Checks ranges; throws UserError naming `prefix`.key, e.g. "data.arithmetic.ops: unknown op
// 'sub' (known: add, mul)".
void validate(const DataConfig& config, const std::string& prefix = "data");

// train_path / test_path, or the shipped data/<task>/{train,test}.jsonl when empty.
std::filesystem::path train_file(const DataConfig& config);
std::filesystem::path test_file(const DataConfig& config);

// Fills a template: {prompt}, {answer}, {task} and {<field>} for each task field (a list prints
// as its elements joined by spaces, a string as itself, a number as JSON); "{{" and "}}" are
// literal braces. Throws UserError naming `template_name` for an unknown placeholder, e.g.
// "data.prompt_template: unknown placeholder {targte} (record has: prompt, answer, task, numbers,
// target)".
std::string fill_template(const std::string& text, const TaskRecord& record,
                          const std::string& template_name = "template");
// The prompt (prompt_template) and the SFT completion (completion_template) of a record.
//   arithmetic {"prompt": "12+35=", "answer": "47"}       -> "12+35=", "<answer>47</answer>"
//   countdown  {"prompt": "Use 3 5 7 to make 22:", "answer": "3*5+7", ...}
//                                                        -> "Use 3 5 7 to make 22:",
//                                                           "<answer>3*5+7</answer>"
std::string format_prompt(const TaskRecord& record, const DataConfig& config);
std::string format_completion(const TaskRecord& record, const DataConfig& config);

}  // namespace unstuck::data
