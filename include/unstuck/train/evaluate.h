// Evaluation of a policy on task records: greedy accuracy, and pass@k over k sampled completions,
// scored by the task's verifier. Used by SFT, GRPO and `unstuck eval`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "unstuck/data/data_config.h"
#include "unstuck/data/prompt_formatter.h"
#include "unstuck/data/record.h"
#include "unstuck/model/llama.h"
#include "unstuck/reward/verifier.h"
#include "unstuck/rollout/sampler.h"
#include "unstuck/rollout/sampling_config.h"
#include "unstuck/tokenizer/tokenizer.h"
#include "unstuck/train/prompt_fit.h"

namespace unstuck::train {

struct EvalOptions {
  int64_t max_new_tokens = 32;    // completion length limit
  int64_t batch_size = 128;       // prompts decoded together
  int64_t k = 0;                  // samples per prompt for pass@k; 0 = greedy only
  double temperature = 1.0;       // sampling temperature of the pass@k samples
  uint64_t seed = 0;              // sampling stream of the pass@k samples
  std::vector<int32_t> stop_ids;  // tokens that end a completion (stop_token_ids()); empty: none
  // Set (by Ctrl-C): scoring stops waiting for reward workers and throws Interrupted; null: none.
  const std::atomic<bool>* stop = nullptr;
  // Tools (tools.functions): runs the tool rounds on a batch's first turns (`completions`, sampled
  // from `prompts` with `options`), continuing each row with the same options; returns each
  // completion's messages. Unset: one turn. The last assistant turn is scored.
  std::function<std::vector<nlohmann::json>(const std::vector<std::vector<int32_t>>& prompts,
                                            std::vector<rollout::Completion>& completions,
                                            const rollout::GenerateOptions& options)>
      turns;
  // tools.environment: resets one instance per record of a batch (before each of its generations)
  // and returns what each reset() appended to its prompt ("" for nothing). Unset: no environment.
  std::function<std::vector<std::string>(const std::vector<const data::TaskRecord*>& records)> observations;
  std::string environment;  // the class `observations` resets (named when a prompt outgrows the context)
  // tools.environment's instances, for a reward function that reads them (TRL's environments=).
  reward::EnvironmentScorer environments;
};

struct EvalResult {
  int64_t records = 0;
  double accuracy = 0.0;     // greedy: fraction scored correct
  double mean_reward = 0.0;  // greedy: mean verifier reward
  double pass_at_k = 0.0;    // fraction with at least one correct sample among k (k > 0)
  int64_t k = 0;
  std::map<std::string, int64_t> statuses;  // greedy verifier statuses
  std::vector<std::string> examples;        // a few "prompt -> completion [status]" lines
};

// Text of a sampled completion: its tokens up to (without) the first stop token, decoded.
std::string completion_text(const std::vector<int32_t>& tokens, const tokenizer::Tokenizer& tok,
                            const std::vector<int32_t>& stop_ids);

// The last assistant turn of a completion: its tokens after the last tool result (all of them
// without tools), what the verifiers score.
std::vector<int32_t> last_assistant_turn(const rollout::Completion& c);

EvalResult evaluate(const model::LlamaModel& model, const tokenizer::Tokenizer& tok,
                    const std::vector<data::TaskRecord>& records, const data::PromptFormatter& prompts,
                    const reward::Verifier& verifier, const EvalOptions& options);

}  // namespace unstuck::train
