// The tool loop's hooks shared by GRPO's rollouts and the evaluations (train/tool_turns.h).
#include "train/tool_turns.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <string>
#include <utility>

#include "unstuck/common/error.h"

namespace unstuck::train {

rollout::ToolTurnHooks tool_turn_hooks(const tokenizer::Tokenizer& tok, const data::PromptFormatter& prompts,
                                       std::shared_ptr<rollout::ToolRunner> tools, const std::atomic<bool>* stop) {
  rollout::ToolTurnHooks hooks;
  const std::string& eos = prompts.eos_token();
  hooks.turn = [&tok, &eos, format = rollout::tool_call_format(prompts)](const std::vector<int32_t>& ids) {
    return rollout::read_assistant_turn(tok.decode(ids, false), tok.decode(ids, true), eos, format);
  };
  hooks.run = [tools = std::move(tools), stop](const std::vector<std::vector<rollout::ToolCall>>& calls) {
    std::vector<rollout::ToolCall> flat;
    for (const auto& row : calls) flat.insert(flat.end(), row.begin(), row.end());
    const std::vector<rollout::ToolOutcome> results = tools->call(flat, stop);
    std::vector<std::vector<rollout::ToolOutcome>> out;
    std::size_t at = 0;
    for (const auto& row : calls) {
      out.emplace_back(results.begin() + std::ptrdiff_t(at), results.begin() + std::ptrdiff_t(at + row.size()));
      at += row.size();
    }
    return out;
  };
  hooks.suffix = [&tok, &prompts](const std::vector<rollout::ToolCall>& calls,
                                  const std::vector<rollout::ToolOutcome>& results) {
    return rollout::tool_result_tokens(prompts, tok, calls, results);
  };
  return hooks;
}

rollout::ToolTurnLimits tool_turn_limits(const rollout::ToolsConfig& tools, int64_t max_new_tokens,
                                         int64_t max_context) {
  rollout::ToolTurnLimits limits;
  limits.max_iterations = tools.max_iterations;
  limits.max_new_tokens = max_new_tokens;
  limits.max_context = max_context;
  return limits;
}

decltype(EvalOptions::turns) eval_tool_turns(const model::LlamaModel& model, rollout::ToolTurnHooks hooks,
                                             rollout::ToolTurnLimits limits, uint64_t seed) {
  return [&model, hooks = std::move(hooks), limits, seed](const std::vector<std::vector<int32_t>>& prompts,
                                                          std::vector<rollout::Completion>& completions,
                                                          const rollout::GenerateOptions& options) {
    rollout::ToolTurnHooks h = hooks;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    h.generate = [&](const std::vector<int64_t>& rows, const std::vector<std::vector<int32_t>>& contexts,
                     const std::vector<int64_t>&, const std::vector<int64_t>& max_new) {
      rollout::GenerateOptions o = options;  // its contexts: the first turns' (kept), then each round's
      o.sampling.max_new_tokens = *std::max_element(max_new.begin(), max_new.end());
      o.row_max_new = max_new;
      o.row_ids = rows;
      return rollout::generate(model, contexts, o, gen);
    };
    std::vector<nlohmann::json> out;
    for (const rollout::ToolTurnStats& t : rollout::run_tool_turns(prompts, completions, h, limits))
      out.push_back(t.messages);
    if (options.contexts) *options.contexts = rollout::KeptContexts();  // the batch's caches, released
    return out;
  };
}

nlohmann::json environment_row(const data::TaskRecord& record) {
  nlohmann::json row = record.fields;
  row["answer"] = record.answer;
  row["task"] = record.task;
  row["prompt"] = record.messages.empty() ? nlohmann::json(record.prompt) : record.messages;
  return row;
}

void evaluate_with_environment(EvalOptions& o, std::shared_ptr<rollout::ToolRunner> tools,
                               const std::atomic<bool>* stop) {
  if (!tools || !tools->has_environment()) return;
  o.environment = tools->environment_class();
  o.environments = environment_scorer(tools, stop);
  o.observations = [tools = std::move(tools), stop](const std::vector<const data::TaskRecord*>& records) {
    std::vector<nlohmann::json> rows;
    for (const data::TaskRecord* r : records) rows.push_back(environment_row(*r));
    return tools->reset_environments(rows, stop);
  };
}

reward::EnvironmentScorer environment_scorer(std::shared_ptr<rollout::ToolRunner> tools,
                                             const std::atomic<bool>* stop) {
  return [tools = std::move(tools), stop](const nlohmann::json& function, const std::vector<nlohmann::json>& items,
                                          const nlohmann::json& state) {
    return tools->score_with_environments(function, items, state, stop);
  };
}

void check_environment_readers(const reward::Verifier& verifier, const rollout::ToolRunner* tools) {
  if (verifier.reads_environments() && !(tools && tools->has_environment()))
    throw UserError(
        "reward: a TRL reward function takes environments, the instances TRL passes with environment_factory, "
        "but tools.environment is not set (set it to the environment class, or drop the parameter)");
}

}  // namespace unstuck::train
