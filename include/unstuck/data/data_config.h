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

// The synthetic tasks this project generates (docs/TASKS.md).
enum class TaskKind { arithmetic, countdown };

inline constexpr std::array<std::pair<TaskKind, const char*>, 2> kTaskKindNames{{
    {TaskKind::arithmetic, "arithmetic"},
    {TaskKind::countdown, "countdown"},
}};
constexpr const auto& enum_names(TaskKind) { return kTaskKindNames; }

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
  TaskKind task = TaskKind::arithmetic;      // which task (and verifier) the run uses
  std::string train_path;                    // JSONL; empty = data/<task>/train.jsonl
  std::string test_path;                     // JSONL; empty = data/<task>/test.jsonl
  std::string prompt_template = "{prompt}";  // what the model is given
  std::string completion_template = "<answer>{answer}</answer>";  // SFT target after the prompt
  double test_fraction = 0.1;    // share of the problem space reserved for test
  ArithmeticOptions arithmetic;  // generator options of the arithmetic task
  CountdownOptions countdown;    // generator options of the countdown task

  template <class V>
  void visit(V& v) {
    v("task", task, "synthetic task: arithmetic (a+b=, a*b=) or countdown (make a target)");
    v("train_path", train_path, "training JSONL; empty: data/<task>/train.jsonl");
    v("test_path", test_path, "evaluation JSONL; empty: data/<task>/test.jsonl");
    v("prompt_template", prompt_template,
      "prompt given to the model; {prompt}, {answer}, {task} and any task field, e.g. {target}");
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
