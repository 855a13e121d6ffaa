// Options of the reward component: where the final answer is looked for, the format credit a
// well-formed but wrong answer earns, and the limits that bound a verifier's work on any input.
// Header-only options (visit() for the config code); validate() lives in src/reward/verifier.cpp.
#pragma once

#include <string>
#include <vector>

#include "unstuck/reward/code_config.h"
#include "unstuck/reward/function_config.h"
#include "unstuck/reward/math_answer.h"

namespace unstuck::reward {

struct RewardConfig {
  std::string verifier;  // math, arithmetic or countdown; empty = the one data.task names
  // Answer formats tried in order; the first one found in the completion is the answer.
  std::vector<std::string> answer_formats{"answer_tag", "boxed", "hashes"};
  double format_reward = 0.1;     // reward of a non-correct completion with <answer>...</answer>
  int max_answer_chars = 256;     // longer extracted answers are rejected (no_answer) unread
  int max_expression_depth = 32;  // countdown: deeper parenthesis nesting is rejected (no_answer)
  MathOptions math;               // math: tolerance, units, "the answer is" fallback
  FunctionConfig function;        // a user's Python reward function instead of the verifier
  std::vector<std::string> command;  // a reward command [prog, args...] (JSONL on stdin/stdout) instead
  CodeConfig code;                // code: extraction, scoring, sandbox limits

  template <class V>
  void visit(V& v) {
    v("verifier", verifier,
      "what scores a completion: math (a number / fraction compared by value), arithmetic (the "
      "same), countdown (an expression using the given numbers), code (the program run against the "
      "record's tests in a sandbox, reward.code); empty: the one data.task names");
    v("answer_formats", answer_formats,
      "where the final answer is read, first found wins: answer_tag (<answer>x</answer>), "
      "boxed (the last \\boxed{x} or \\fbox{x}), hashes (#### x)");
    v("format_reward", format_reward,
      "reward of a completion that is not correct but has a non-blank <answer>...</answer>; "
      "a correct one gets 1 (0 disables; must be < 1)");
    v("max_answer_chars", max_answer_chars,
      "longest extracted answer a verifier reads; longer ones score no_answer");
    v("max_expression_depth", max_expression_depth,
      "deepest parenthesis nesting a countdown expression may use; deeper ones score no_answer");
    v("math", math, "math verifier strictness: numeric tolerance, units, \"the answer is\" fallback");
    v("code", code, "the code verifier: where the program is, partial credit, the sandbox's limits");
    v("function", function,
      "your own reward function (Python, verl's or TRL's form), run by reward workers; path empty: off");
    v("command", command,
      "a reward command [program, args...] speaking Unstuck's JSONL protocol on stdin/stdout (docs/TASKS.md), "
      "for verifiers not in Python; run like reward.function (its workers, batch_size, timeout_s, memory_mb, "
      "max_error_frac); empty: off");
  }
};

// Checks ranges and names; throws UserError naming `prefix`.key, e.g. "reward.answer_formats:
// unknown format 'latex' (known: answer_tag, boxed, hashes)".
void validate(const RewardConfig& config, const std::string& prefix = "reward");

// True when the run's scorer can fail on a completion (reward_error): reward.function or
// reward.command (user code on workers), or the code verifier (its sandbox).
bool scorer_can_fail(const RewardConfig& config, const std::string& verifier_name);

}  // namespace unstuck::reward
