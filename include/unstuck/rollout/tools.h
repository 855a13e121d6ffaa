// Tools in the rollout (docs/TOOLS.md): the policy calls Python functions and reads their results
// before it answers, as TRL 1.16's GRPOTrainer(tools=[...]) runs them. A row is sampled to its end
// of turn; the turn's <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks (the Qwen2.5 /
// Qwen3 / Hermes format) are called on out-of-process workers; the results, rendered by the chat
// template as its tool messages (with the generation prompt after them), are appended to the row,
// which is sampled again from there. The appended tokens are context, never the policy's: the loss,
// the KL and the entropy mask them out. A row stops calling at tools.max_iterations, or when the
// results would not fit in rollout.max_new_tokens (they are dropped then, as TRL drops them).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "unstuck/rollout/sampler.h"
#include "unstuck/rollout/tool_config.h"

namespace unstuck::reward {
class WorkerPool;
struct WorkerResult;
struct SandboxOptions;
}  // namespace unstuck::reward
namespace unstuck::data {
class PromptFormatter;
}
namespace unstuck::tokenizer {
class Tokenizer;
}

namespace unstuck::rollout {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // as the model wrote them (TRL calls name(**arguments))
  int64_t slot = -1;  // the row that made it (run_tool_turns sets it): tools.environment's instance of that row
};

// How a chat template writes an assistant's tool calls (tool_call_format() reads it off the template).
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks (Qwen2.5, Qwen3, Hermes)
//   llama3_json  a turn ending {"name": ..., "parameters": {...}} and the end of turn (Llama 3.1 / 3.2)
enum class ToolCallFormat { hermes, llama3_json };

// The format of `format`'s chat template, found by rendering an assistant turn that calls a probe
// tool. Throws UserError naming the template, with what it rendered, for any other form.
ToolCallFormat tool_call_format(const data::PromptFormatter& format);

// The tool calls of one assistant turn (its text with special tokens), as TRL 1.16's parse_response
// finds them. hermes: each <tool_call>JSON</tool_call> block, JSON = {"name": string, "arguments":
// object}; empty when the turn has none, and when any block is not such an object (TRL then takes
// the turn as plain text: no call is made); an unclosed block (a turn cut at the token limit) is no
// call. llama3_json: one call, the JSON object that ends the turn right before `eos` (the template's
// end-of-turn text), its "parameters" the arguments; no call without `eos` (a cut turn), or when the
// object has other keys or does not parse. Missing or null arguments become {} (TRL's validation).
//   "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>" -> [{add, {a: 1}}]
//   "{\"name\": \"add\", \"parameters\": {\"a\": 1}}<|eot_id|>" (llama3_json)     -> [{add, {a: 1}}]
std::vector<ToolCall> parse_tool_calls(const std::string& text, ToolCallFormat format = ToolCallFormat::hermes,
                                       const std::string& eos = "");

// An assistant turn as TRL 1.16's parse_response gives it for the Qwen2.5 / Qwen3 and Llama 3.1
// templates (the message reward functions receive): {"role": "assistant", "content",
// "reasoning_content" (hermes: a leading <think>...</think>), "tool_calls": [{"type": "function",
// "function": {name, arguments}}]}. `text` is the turn decoded with its special tokens, `plain`
// without them, `eos` the template's EOS text (cut from the end). hermes: the content is the last
// stretch of text outside the <tool_call> blocks, trimmed (as transformers' parser keeps it), and a
// turn whose blocks do not parse is plain text: {"content": plain}. llama3_json: the text before the
// call, trimmed, or the whole turn's when it makes no call.
//   "Let me check.\n<tool_call>{...}</tool_call><|im_end|>" -> content "", one tool call
//   "  The product is 42. <|im_end|>"                        -> content "The product is 42."
nlohmann::json assistant_message(const std::string& text, const std::string& plain, const std::string& eos,
                                 ToolCallFormat format = ToolCallFormat::hermes);

// One assistant turn read once: its calls (parse_tool_calls) and its message (assistant_message).
struct AssistantTurn {
  std::vector<ToolCall> calls;
  nlohmann::json message;  // null where the caller keeps no messages
};
AssistantTurn read_assistant_turn(const std::string& text, const std::string& plain, const std::string& eos,
                                  ToolCallFormat format);

// get_reward() of a row's environment instance: its score, or the error it raised.
struct EnvironmentScore {
  double score = 0.0;
  std::string error;  // not empty: no score
};

struct ToolOutcome {
  std::string content;  // what the model reads: str(result), or str({'error': ...}) as TRL writes it
  bool failed = false;  // the call raised, timed out, or named no tool
  double seconds = 0.0;
};

// The tool workers (reward::WorkerPool running src/reward/reward_worker.py --style tools): started
// once, each tool's schema derived at the start (a tool without one is a UserError naming it).
class ToolRunner {
 public:
  explicit ToolRunner(const ToolsConfig& config);
  ~ToolRunner();
  // [{"type": "function", "function": {...}}, ...] in tools.functions order, keys in the order
  // transformers writes them (the chat template's tojson keeps it).
  const nlohmann::ordered_json& schemas() const { return schemas_; }
  int workers() const;  // the worker processes
  // Every call, each on its own request (a slow or hung one delays only itself), at most
  // tools.workers at once. `cancel` as reward::WorkerPool::run takes it.
  std::vector<ToolOutcome> call(const std::vector<ToolCall>& calls, const std::atomic<bool>* cancel = nullptr);

  // tools.environment (TRL's environment_factory): each row (slot) has its own instance, held by
  // worker slot % tools.workers; the calls of a row's methods go there.
  bool has_environment() const { return !environment_class_.empty(); }
  const std::string& environment_class() const { return environment_class_; }
  bool environment_scores() const { return environment_scores_; }  // the class defines get_reward
  // reset(**kwargs[i]) on slot i's instance (created at its first reset, reused after); each slot's
  // observation, "" where reset returned None. Throws UserError naming the slot when a reset fails.
  std::vector<std::string> reset_environments(const std::vector<nlohmann::json>& kwargs,
                                              const std::atomic<bool>* cancel = nullptr);
  // get_reward() of slots [0, n) (the rows reset last).
  std::vector<EnvironmentScore> environment_rewards(std::size_t n, const std::atomic<bool>* cancel = nullptr);
  // A TRL reward function that reads the instances (environments=; reward::EnvironmentScorer's
  // arguments, item i with "slot" i): called once on each worker's rows, as TRL calls it once on each
  // process's rows; one result per item, in order. Calls from several threads (reward.terms) take turns.
  std::vector<reward::WorkerResult> score_with_environments(const nlohmann::json& function,
                                                            const std::vector<nlohmann::json>& items,
                                                            const nlohmann::json& trainer_state,
                                                            const std::atomic<bool>* cancel = nullptr);

 private:
  std::vector<ToolOutcome> call_workers(const std::vector<ToolCall>& calls, const std::atomic<bool>* cancel);
  // tools.builtin_python: the calls of `python`, each program a sandboxed job.
  std::vector<ToolOutcome> run_python(const std::vector<ToolCall>& calls) const;

  std::unique_ptr<reward::WorkerPool> pool_;
  nlohmann::ordered_json schemas_;
  std::unique_ptr<reward::SandboxOptions> sandbox_;  // tools.builtin_python (null without): the jobs' limits
  std::string python_;                               // tools.builtin_python: the interpreter in the sandbox
  std::string environment_class_;                    // tools.environment: the class's name (empty: none)
  bool environment_scores_ = false;
  std::mutex scoring_;  // score_with_environments' calls, one at a time on the pool
};

// The tokens that follow an assistant turn with these calls and results, found as TRL 1.16 finds them
// (GRPOTrainer._get_tool_suffix_ids): a dummy conversation with one assistant tool call is rendered
// without and with the tool messages ({"role": "tool", "name", "content"}) and the next generation
// prompt; the second's tokens past the first's, the first cut after its last EOS, are the suffix.
// Throws UserError when the first is not a prefix of the second (a template that cannot carry them).
std::vector<int32_t> tool_result_tokens(const data::PromptFormatter& format, const tokenizer::Tokenizer& tok,
                                        const std::vector<ToolCall>& calls, const std::vector<ToolOutcome>& results);

// What the multi-turn loop needs from its caller (the trainer; tests script it).
struct ToolTurnHooks {
  // One assistant turn's tokens read: its tool calls and its message (read_assistant_turn; a null
  // message keeps none).
  std::function<AssistantTurn(const std::vector<int32_t>&)> turn;
  // Runs the calls of every row listed (one list per row), results in the same shape.
  std::function<std::vector<std::vector<ToolOutcome>>(const std::vector<std::vector<ToolCall>>&)> run;
  // The tokens that follow a turn with these calls and results: the template's tool messages and the
  // generation prompt of the next assistant turn.
  std::function<std::vector<int32_t>(const std::vector<ToolCall>&, const std::vector<ToolOutcome>&)> suffix;
  // One more turn for each row of `rows`, continuing `contexts` (prompt + completion so far): at most
  // max_new[i] tokens for row i, whose sampled tokens take uniforms from index offset[i] on.
  std::function<std::vector<Completion>(const std::vector<int64_t>& rows,
                                        const std::vector<std::vector<int32_t>>& contexts,
                                        const std::vector<int64_t>& offset, const std::vector<int64_t>& max_new)>
      generate;
};

struct ToolTurnLimits {
  int64_t max_iterations = 0;  // 0: no limit but the tokens
  int64_t max_new_tokens = 0;  // a completion's budget: the policy's tokens and the tools' together
  int64_t max_context = 0;     // the model's positions: prompt + completion stays below it (0: no limit)
};

// Per-row counts of the loop (metrics).
struct ToolTurnStats {
  int64_t calls = 0, failures = 0, turns = 1, tool_tokens = 0, dropped = 0;  // dropped: results that did not fit
  double seconds = 0.0;                                                      // in the tools
  // Tokens of the row's contexts its tool rounds computed: its last sampled token and the results
  // when it continues from its KV cache (GenerateOptions::contexts), its whole context when not.
  int64_t context_tokens = 0;
  // The completion as TRL's reward functions receive it (messages read by hooks.turn): each assistant turn's
  // message, each kept result as {"role": "tool", "name", "content"}; a turn cut to nothing is left out.
  nlohmann::json messages = nlohmann::json::array();
};

// Runs tool rounds on `completions` (each row's first turn, sampled from `prompts`) until no row
// calls a tool, each row's calls, results and next turn appended to it; the tool tokens get
// from_tool = 1 and log-prob 0. Returns each row's stats.
std::vector<ToolTurnStats> run_tool_turns(const std::vector<std::vector<int32_t>>& prompts,
                                          std::vector<Completion>& completions, const ToolTurnHooks& hooks,
                                          const ToolTurnLimits& limits);

}  // namespace unstuck::rollout
