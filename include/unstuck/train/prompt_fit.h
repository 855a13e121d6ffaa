// Prompts against the context: the token ids a policy is prompted with, and which records of a
// split fit in model.max_seq_len - rollout.max_new_tokens. Free of libtorch, so a run's plan
// (run_plan.h) can size its data before any model exists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "unstuck/data/prompt_formatter.h"
#include "unstuck/data/record.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::train {

// Token ids a policy is prompted with. Without a chat template: BOS (when the tokenizer has one)
// + the prompt_template text; with one: the rendered template's ids alone (it writes BOS itself).
// `appended`: PromptFormatter::render's.
std::vector<int32_t> prompt_ids(const data::TaskRecord& record, const data::PromptFormatter& prompts,
                                const tokenizer::Tokenizer& tok, const std::string& appended = "");
// prompt_ids() of a record whose tools.environment instance returned `observation` from reset()
// (appended to the prompt; "" for none). Throws UserError naming `environment` (the class), the
// lengths and the record when the prompt then exceeds `max_prompt_tokens` (model.max_seq_len -
// rollout.max_new_tokens): training, evaluation and `unstuck generate` check it alike.
std::vector<int32_t> observed_prompt_ids(const data::TaskRecord& record, const data::PromptFormatter& prompts,
                                         const tokenizer::Tokenizer& tok, const std::string& observation,
                                         int64_t max_prompt_tokens, const std::string& environment);

// Records whose prompt fits in `max_prompt_tokens` (max_seq_len - max_new_tokens), in order.
struct PromptFit {
  std::vector<data::TaskRecord> kept;
  std::vector<int64_t> lengths;  // prompt tokens of every input record
  int64_t dropped = 0;           // records whose prompt is longer than the limit
  int64_t longest = 0;           // tokens of the longest prompt, kept or dropped
};
PromptFit fit_prompts(std::vector<data::TaskRecord> records, const data::PromptFormatter& prompts,
                      const tokenizer::Tokenizer& tok, int64_t max_prompt_tokens);
// Logs "<what>: dropped N of M records whose prompt exceeds L tokens (longest: K)" when `fit`
// dropped any; throws UserError when none is left (naming model.max_seq_len and
// rollout.max_new_tokens).
void report_prompt_fit(const PromptFit& fit, int64_t max_prompt_tokens, const std::string& what);
// fit_prompts() then report_prompt_fit(): the records that fit.
std::vector<data::TaskRecord> drop_overlong_prompts(std::vector<data::TaskRecord> records,
                                                    const data::PromptFormatter& prompts,
                                                    const tokenizer::Tokenizer& tok, int64_t max_prompt_tokens,
                                                    const std::string& what);

}  // namespace unstuck::train
