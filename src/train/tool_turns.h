// The tool loop's hooks on a model, its tokenizer and chat template, shared by GRPO's rollouts and
// every evaluation (GRPO's, `unstuck eval`): the calls parsed in the template's format, run on the
// tool workers, their results rendered as the template's tool messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "unstuck/data/prompt_formatter.h"
#include "unstuck/model/llama.h"
#include "unstuck/rollout/tools.h"
#include "unstuck/tokenizer/tokenizer.h"
#include "unstuck/train/evaluate.h"

namespace unstuck::train {

// All hooks but `generate`, the calls read in the format of `prompts`' chat template
// (rollout::tool_call_format). `tok`, `prompts` (rendering the tools) and `tools` must outlive them;
// `stop` (the signal flag, may be null) stops waiting for the workers.
rollout::ToolTurnHooks tool_turn_hooks(const tokenizer::Tokenizer& tok, const data::PromptFormatter& prompts,
                                       std::shared_ptr<rollout::ToolRunner> tools, const std::atomic<bool>* stop);

// The loop's limits: the config's tools.max_iterations, a completion's token budget and the model's
// positions.
rollout::ToolTurnLimits tool_turn_limits(const rollout::ToolsConfig& tools, int64_t max_new_tokens,
                                         int64_t max_context);

// EvalOptions::turns: the tool rounds of an evaluation batch on `model`, each row continued with the
// batch's generate options (sampled continuations draw from a generator seeded with `seed`), from
// its KV cache where the options' `contexts` kept it (released at the end).
decltype(EvalOptions::turns) eval_tool_turns(const model::LlamaModel& model, rollout::ToolTurnHooks hooks,
                                             rollout::ToolTurnLimits limits, uint64_t seed);

// The row an environment's reset() receives, as TRL passes the dataset row: the record's columns
// (its fields, answer, task) and its prompt (chat messages, or text).
nlohmann::json environment_row(const data::TaskRecord& record);

// An evaluation with `tools`' environment: each record's instance reset with its row before each
// generation (EvalOptions::observations), the class named in errors, the instances read by the
// reward functions that take them. Nothing when `tools` has no environment.
void evaluate_with_environment(EvalOptions& o, std::shared_ptr<rollout::ToolRunner> tools,
                               const std::atomic<bool>* stop);

// ScoringContext::environments of `tools`' environment: the instances its workers hold.
reward::EnvironmentScorer environment_scorer(std::shared_ptr<rollout::ToolRunner> tools, const std::atomic<bool>* stop);

// Throws UserError before a run when a reward function of `verifier` takes environments (TRL passes
// environment_factory's instances) and `tools` has no environment.
void check_environment_readers(const reward::Verifier& verifier, const rollout::ToolRunner* tools);

}  // namespace unstuck::train
