// Prompts against the context (prompt_fit.h): a record's prompt ids and the records that fit.
#include "unstuck/train/prompt_fit.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "unstuck/common/error.h"

namespace unstuck::train {

std::vector<int32_t> prompt_ids(const data::TaskRecord& record, const data::PromptFormatter& prompts,
                                const tokenizer::Tokenizer& tok, const std::string& appended) {
  std::vector<int32_t> ids;
  if (prompts.prepend_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const std::vector<int32_t> body = tok.encode(prompts.render(record, appended));
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int32_t> observed_prompt_ids(const data::TaskRecord& record, const data::PromptFormatter& prompts,
                                         const tokenizer::Tokenizer& tok, const std::string& observation,
                                         int64_t max_prompt_tokens, const std::string& environment) {
  std::vector<int32_t> ids = prompt_ids(record, prompts, tok, observation);
  if (!observation.empty() && int64_t(ids.size()) > max_prompt_tokens)
    throw UserError(
        "tools.environment: " + environment + ".reset appended " + std::to_string(observation.size()) +
        " characters to a prompt, making it " + std::to_string(ids.size()) + " tokens, more than the " +
        std::to_string(max_prompt_tokens) +
        " that model.max_seq_len - rollout.max_new_tokens leave (the prompt: " + record.prompt.substr(0, 200) + ")");
  return ids;
}

PromptFit fit_prompts(std::vector<data::TaskRecord> records, const data::PromptFormatter& prompts,
                      const tokenizer::Tokenizer& tok, int64_t max_prompt_tokens) {
  PromptFit fit;
  for (data::TaskRecord& r : records) {
    const auto n = int64_t(prompt_ids(r, prompts, tok).size());
    fit.lengths.push_back(n);
    fit.longest = std::max(fit.longest, n);
    if (n > max_prompt_tokens) {
      ++fit.dropped;
    } else {
      fit.kept.push_back(std::move(r));
    }
  }
  return fit;
}

void report_prompt_fit(const PromptFit& fit, int64_t max_prompt_tokens, const std::string& what) {
  if (fit.dropped > 0)
    spdlog::warn(
        "{}: dropped {} of {} records whose prompt exceeds {} tokens (model.max_seq_len - "
        "rollout.max_new_tokens); longest prompt: {} tokens",
        what, fit.dropped, fit.lengths.size(), max_prompt_tokens, fit.longest);
  if (fit.kept.empty() && !fit.lengths.empty())
    throw UserError(what + ": every prompt is longer than " + std::to_string(max_prompt_tokens) + " tokens (longest: " +
                    std::to_string(fit.longest) + "); raise model.max_seq_len or lower rollout.max_new_tokens");
}

std::vector<data::TaskRecord> drop_overlong_prompts(std::vector<data::TaskRecord> records,
                                                    const data::PromptFormatter& prompts,
                                                    const tokenizer::Tokenizer& tok, int64_t max_prompt_tokens,
                                                    const std::string& what) {
  PromptFit fit = fit_prompts(std::move(records), prompts, tok, max_prompt_tokens);
  report_prompt_fit(fit, max_prompt_tokens, what);
  return std::move(fit.kept);
}

}  // namespace unstuck::train
