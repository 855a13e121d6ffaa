// Verifiers turn (completion, task record) into a reward and a status. The registry builds one by
// task name: math (the answer compared by mathematical equivalence: LaTeX, expressions, sets,
// intervals), arithmetic (compared as a number), countdown (an expression that uses each given
// number once and equals the target). Reward: 1 when correct; otherwise
// format_reward when the completion has a non-blank <answer>...</answer>; otherwise 0.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "unstuck/data/record.h"
#include "unstuck/reward/reward_config.h"
#include "unstuck/reward/worker_pool.h"

namespace unstuck::reward {

enum class RewardStatus {
  correct,    // the answer is right
  wrong,      // a well-formed answer with the wrong value
  no_answer,  // no answer found, or not readable (not a number, not an expression, too long/deep)
  invalid,    // readable but breaks the task's rules (countdown: wrong numbers, division by zero)
  error,      // a reward function failed on it (raised, timed out, returned a non-number): reward 0
  // Every scorer of it returned None (TRL: "not applicable to this sample"): reward NaN, left out of
  // its group's baseline and scale, advantage 0.
  not_applicable,
};

inline constexpr std::array<std::pair<RewardStatus, const char*>, 6> kRewardStatusNames{{
    {RewardStatus::correct, "correct"},
    {RewardStatus::wrong, "wrong"},
    {RewardStatus::no_answer, "no_answer"},
    {RewardStatus::invalid, "invalid"},
    {RewardStatus::error, "reward_error"},
    {RewardStatus::not_applicable, "not_applicable"},
}};
constexpr const auto& enum_names(RewardStatus) { return kRewardStatusNames; }

struct RewardResult {
  RewardResult() = default;
  RewardResult(double reward_, RewardStatus status_, std::string error_ = {})
      : reward(reward_), status(status_), error(std::move(error_)) {}
  double reward = 0.0;  // 1 if correct, else the format credit (if any), else 0; NaN when not_applicable
  RewardStatus status = RewardStatus::no_answer;
  std::string error;  // status error: why (the function's traceback, "timed out after 60 s", ...)
  // Named numbers beside the reward, logged as reward_extra/<key> means: a verl function's dict keys
  // other than "score", the code verifier's pass_frac and outcome counts; with reward.terms a term's
  // own extras as "<term>/<key>".
  std::map<std::string, double> extra;
  // With reward.terms: each term's reward (before its weight) by the term's name, logged as reward/<name>
  // (a term that returned None for it has none).
  std::map<std::string, double> terms;
  // Named values that are not numbers (a verl dict's text keys, TRL's log_extra text columns), as the
  // function gave them: `unstuck reward score` prints them; a run does not log them.
  std::map<std::string, nlohmann::json> columns;
  // TRL's log_metric values of the call this completion was scored in (on the call's first completion
  // only), logged as reward_metric/<name>: the mean over the step's calls.
  std::map<std::string, std::vector<double>> metrics;
};

// tools.environment's instances, for a TRL reward function that reads them (environments=): scores
// `items` (TRL items, one per completion in order, item i with "slot": i, row i's instance) with
// `function` ({path, name, pythonpath, kwargs, factory_kwargs}) and TRL's trainer_state `state` on the
// tool workers that hold the instances; one result per item.
using EnvironmentScorer = std::function<std::vector<WorkerResult>(
    const nlohmann::json& function, const std::vector<nlohmann::json>& items, const nlohmann::json& state)>;

// What a batch is scored in, when the caller knows it: the completions' token ids (TRL's
// completion_ids, the stop token included when one was sampled) and the run's progress (TRL's
// trainer_state).
struct ScoringContext {
  const std::vector<std::vector<int32_t>>* completion_ids = nullptr;  // one per completion; null: not known
  // With tools: each completion as messages (its assistant turns, tool calls and tool results), what
  // TRL's reward functions get as the completion; null: a single turn.
  const std::vector<nlohmann::json>* conversations = nullptr;
  // With tools: each whole completion decoded without special tokens, the tools' results included,
  // as verl's reward managers decode a multi-turn response (a verl-style function's solution_str).
  const std::vector<std::string>* responses = nullptr;
  int64_t global_step = 0;  // optimizer steps done before this batch
  int64_t max_steps = 0;    // the run's steps; 0: not a run
  double epoch = 0.0;       // passes over the training records so far (fractional)
  bool world_process_zero = true;
  // When set while a function's workers score, they give up within 0.25 s and score_batch throws
  // Interrupted (the trainer's SIGINT/SIGTERM flag); null: never.
  const std::atomic<bool>* stop = nullptr;
  // With tools.environment: where its instances are, for the functions that read them; empty: no
  // environment (such a function's batch is then an error).
  EnvironmentScorer environments;
};

class Verifier {
 public:
  virtual ~Verifier() = default;
  // Never throws for any completion text (garbage scores no_answer); throws UserError when the
  // record lacks what the task needs (countdown: "numbers", "target").
  virtual RewardResult score(const std::string& completion, const data::TaskRecord& record) const = 0;
  // Every completion with its record, in order (a reward function scores them in batches on its
  // workers, with `context`); by default score() on each.
  virtual std::vector<RewardResult> score_batch(const std::vector<std::string>& completions,
                                                const std::vector<const data::TaskRecord*>& records,
                                                const ScoringContext& context) const;
  // True when a TRL reward function in it takes environments (TRL's environment_factory instances):
  // it scores only with ScoringContext::environments.
  virtual bool reads_environments() const { return false; }
};

// The names make_verifier() knows: math, arithmetic, countdown, code.
std::vector<std::string> verifier_names();

// A verifier by name with the format credit of `config` applied (code: without); or, when
// reward.function.path (reward.command) is set, the user's function (command) on its workers
// (started here: one that cannot start is a UserError naming why), whatever the name; or, with
// reward.terms, the weighted sum of the terms' scorers (each built as the single form would be; the
// first term's status is the completion's, reward_error when any term failed), whatever the name. Validates
// `config`; an unknown name throws UserError "unknown verifier 'x' (known: math, arithmetic, ...)".
std::unique_ptr<Verifier> make_verifier(const std::string& name, const RewardConfig& config);

// The user's reward function of config.function (path set) on its workers. Its status: correct when
// the function's dict has a true "acc" or, without one, when the score is >= 1; wrong otherwise;
// error when it failed (reward 0, `error` says why).
std::unique_ptr<Verifier> make_function_verifier(const RewardConfig& config);

// The reward command of config.command on its workers (reward.function's worker options), items
// {"prompt", "completion", "answer", "task", "fields"}; statuses as for a function.
std::unique_ptr<Verifier> make_command_verifier(const RewardConfig& config);

// The verifier a run uses: reward.verifier, or the data task's name when that is empty.
//   {verifier: ""}, "countdown" -> "countdown";  {verifier: "math"}, "arithmetic" -> "math"
std::string verifier_name(const RewardConfig& config, const std::string& data_task);

// Correctness alone (reward 1 or 0), for callers that combine rewards themselves.
std::unique_ptr<Verifier> make_math_verifier(const RewardConfig& config);
std::unique_ptr<Verifier> make_number_verifier(const RewardConfig& config);  // arithmetic
std::unique_ptr<Verifier> make_countdown_verifier(const RewardConfig& config);

// reward.verifier: code (src/reward/code_verifier.cpp): the completion's program run against the
// record's tests (MBPP test_list, HumanEval test + entry_point, APPS input_output) in the sandbox of
// unstuck/reward/sandbox.h, config.code's limits. Checks that the sandbox can start (a UserError
// naming what is missing otherwise) before it returns.
std::unique_ptr<Verifier> make_code_verifier(const RewardConfig& config);

// The combination rule: `correctness` unchanged when correct; otherwise reward = format_reward if
// has_answer_tag(completion), else 0. The status is kept.
//   format_reward 0.1: correct -> 1.0; "<answer>41</answer>" for 42 -> 0.1; "41" -> 0.0
RewardResult with_format_credit(RewardResult correctness, const std::string& completion, const RewardConfig& config);

}  // namespace unstuck::reward
