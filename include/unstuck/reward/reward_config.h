// Options of the reward component: where the final answer is looked for, the format credit a
// well-formed but wrong answer earns, and the limits that bound a verifier's work on any input.
// Header-only options (visit() for the config code); validate() lives in src/reward/verifier.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "unstuck/reward/code_config.h"
#include "unstuck/reward/function_config.h"
#include "unstuck/reward/math_answer.h"

namespace unstuck::reward {

// One term of reward.terms: a scorer (a built-in verifier, a Python function or a command) and the
// weight of its reward in the total.
struct RewardTerm {
  std::string name;                  // the metric reward/<name>; empty: the verifier's or function's name, or "command"
  std::string verifier;              // math, arithmetic, countdown or code
  FunctionConfig function;           // or a Python reward function (path set), run by its own workers
  std::vector<std::string> command;  // or a reward command [prog, args...] (function's worker options)
  double weight = 1.0;

  template <class V>
  void visit(V& v) {
    v("name", name,
      "the term's name in the metrics (reward/<name>) and in the extras (reward_extra/<name>/<key>); empty: the "
      "verifier's name, the function's name, or 'command'");
    v("verifier", verifier, "a built-in verifier: math, arithmetic, countdown, code (reward.* options apply)");
    v("function", function, "or a Python reward function, as reward.function");
    v("command", command, "or a reward command, as reward.command (with this term's function.* worker options)");
    v("weight", weight, "the term's weight: the reward is the sum of weight x the term's reward (any finite number)");
  }
};

struct RewardConfig {
  std::string verifier;  // math, arithmetic or countdown; empty = the one data.task names
  // Answer formats tried in order; the first one found in the completion is the answer.
  std::vector<std::string> answer_formats{"answer_tag", "boxed", "hashes"};
  double format_reward = 0.1;        // reward of a non-correct completion with <answer>...</answer>
  int max_answer_chars = 256;        // longer extracted answers are rejected (no_answer) unread
  int max_expression_depth = 32;     // countdown: deeper parenthesis nesting is rejected (no_answer)
  MathOptions math;                  // math: tolerance, units, "the answer is" fallback
  FunctionConfig function;           // a user's Python reward function instead of the verifier
  std::vector<std::string> command;  // a reward command [prog, args...] (JSONL on stdin/stdout) instead
  CodeConfig code;                   // code: extraction, scoring, sandbox limits
  std::vector<RewardTerm> terms;     // weighted terms instead of the one scorer above

  template <class V>
  void visit(V& v) {
    v("verifier", verifier,
      "what scores a completion: math (a number / fraction compared by value), arithmetic (the "
      "same), countdown (an expression using the given numbers), code (the program run against the "
      "record's tests in a sandbox, reward.code); empty: the one data.task names");
    v("answer_formats", answer_formats,
      "where the final answer is read, first found wins: answer_tag (<answer>x</answer>), "
      "boxed (the last \\boxed{x} or \\fbox{x}), hashes (#### x), last_expression (free text: "
      "\"final answer is x\", \"answer: x\", else the expression ending last; math-verify's "
      "extraction, see docs/TASKS.md)");
    v("format_reward", format_reward,
      "reward of a completion that is not correct but has a non-blank <answer>...</answer>; "
      "a correct one gets 1 (0 disables; must be < 1)");
    v("max_answer_chars", max_answer_chars, "longest extracted answer a verifier reads; longer ones score no_answer");
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
    v("terms", terms,
      "weighted reward terms instead of one scorer: [{verifier: math, weight: 1.0}, {function: {path: f.py}, "
      "weight: 0.2}, ...]; the reward is the weighted sum, the first term's status is the completion's; empty: off");
  }
};

// Checks ranges and names; throws UserError naming `prefix`.key, e.g. "reward.answer_formats:
// unknown format 'latex' (known: answer_tag, boxed, hashes, ...)".
void validate(const RewardConfig& config, const std::string& prefix = "reward");

// Which configured scorer scores, in the one order every reader follows: reward.terms, else
// reward.function (path set), else reward.command, else the built-in verifier (reward.verifier, or
// the one data.task names). A term is read the same way through term_config().
enum class ScorerKind { terms, function, command, verifier };
ScorerKind scorer_kind(const RewardConfig& config);

// The key of a kind: "reward.terms", "reward.function", "reward.command", "reward.verifier".
const char* scorer_key(ScorerKind kind);

// Term `i` of reward.terms as a single-scorer config: the run's reward options with the term's
// verifier, function and command, and no terms.
RewardConfig term_config(const RewardConfig& config, std::size_t i);

// The worker processes the scorer keeps running: reward.function.workers for a function or a command,
// the sum of the terms'; 0 for the built-in verifiers (in this process, or the code verifier's
// sandboxes, started per program).
int64_t scorer_workers(const RewardConfig& config);

// The names of reward.terms in order (each term's name, or its default); empty without terms.
std::vector<std::string> term_names(const RewardConfig& config);

// The limit on failed completions per step and the key that sets it: reward.function.max_error_frac,
// or with reward.terms the smallest of the failing-capable terms' (a completion counts once however
// many of its terms fail). `scorer` names what fails: "reward.function", "reward.terms", ...
struct ErrorLimit {
  double max_frac = 1.0;
  std::string key;
  std::string scorer;
};
ErrorLimit error_limit(const RewardConfig& config, const std::string& verifier_name);

// True when the run's scorer can fail on a completion (reward_error): reward.function or
// reward.command (user code on workers), or the code verifier (its sandbox); or any term that can.
bool scorer_can_fail(const RewardConfig& config, const std::string& verifier_name);

}  // namespace unstuck::reward
