// Batched greedy (and sampled pass@k) evaluation with the rollout engine and the task's verifier.
#include "unstuck/train/evaluate.h"

#include <ATen/CPUGeneratorImpl.h>

#include <spdlog/spdlog.h>

#include <algorithm>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/rollout/sampler.h"

namespace unstuck::train {

std::string completion_text(const std::vector<int32_t>& tokens, const tokenizer::Tokenizer& tok,
                            const std::vector<int32_t>& stop_ids) {
  std::vector<int32_t> kept;
  for (int32_t t : tokens) {
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) break;
    // Rows of an embedding padded beyond the tokenizer (real checkpoints) decode to nothing, as in
    // the tokenizers library.
    if (t < tok.vocab_size()) kept.push_back(t);
  }
  return tok.decode(kept);
}

std::vector<int32_t> last_assistant_turn(const rollout::Completion& c) {
  const auto last_tool = std::find(c.from_tool.rbegin(), c.from_tool.rend(), uint8_t(1));
  return {c.tokens.begin() + (c.from_tool.rend() - last_tool), c.tokens.end()};
}

EvalResult evaluate(const model::LlamaModel& model, const tokenizer::Tokenizer& tok,
                    const std::vector<data::TaskRecord>& records, const data::PromptFormatter& formatter,
                    const reward::Verifier& verifier, const EvalOptions& o) {
  EvalResult r;
  r.records = int64_t(records.size());
  r.k = o.k;
  if (records.empty()) return r;
  rollout::GenerateOptions greedy;
  greedy.sampling.temperature = 0.0;
  greedy.sampling.max_new_tokens = o.max_new_tokens;
  greedy.stop_ids = o.stop_ids;
  greedy.pad_id = tok.pad_id();
  rollout::GenerateOptions sampled = greedy;
  sampled.sampling.temperature = o.temperature;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  int64_t correct = 0, any_correct = 0;
  double reward_sum = 0;
  for (std::size_t begin = 0; begin < records.size(); begin += std::size_t(o.batch_size)) {
    const std::size_t end = std::min(records.size(), begin + std::size_t(o.batch_size));
    std::vector<std::vector<int32_t>> prompts;
    for (std::size_t i = begin; i < end; ++i) prompts.push_back(prompt_ids(records[i], formatter, tok));
    auto outs = rollout::generate(model, prompts, greedy, gen);
    std::vector<nlohmann::json> conversations;
    if (o.turns) conversations = o.turns(prompts, outs, greedy);
    std::vector<bool> solved(end - begin, false);
    std::vector<std::string> texts;
    std::vector<const data::TaskRecord*> batch_records;
    for (std::size_t i = begin; i < end; ++i) {
      texts.push_back(completion_text(last_assistant_turn(outs[i - begin]), tok, o.stop_ids));
      batch_records.push_back(&records[i]);
    }
    reward::ScoringContext context;
    context.stop = o.stop;
    if (o.turns) context.conversations = &conversations;
    const std::vector<reward::RewardResult> scored =
        verifier.score_batch(texts, batch_records, context);  // one call: a function's workers batch it
    for (std::size_t i = begin; i < end; ++i) {
      const std::string& text = texts[i - begin];
      const reward::RewardResult& res = scored[i - begin];
      reward_sum += res.reward;
      const bool ok = res.status == reward::RewardStatus::correct;
      correct += ok;
      ++r.statuses[config::enum_name(res.status)];
      if (r.examples.size() < 5)
        r.examples.push_back(formatter.render(records[i]) + " -> " + text + " [" + config::enum_name(res.status) + "]");
    }
    for (int64_t s = 0; s < o.k; ++s) {
      auto samples = rollout::generate(model, prompts, sampled, gen);
      if (o.turns) o.turns(prompts, samples, sampled);
      for (std::size_t i = begin; i < end; ++i)
        if (!solved[i - begin] &&
            verifier.score(completion_text(last_assistant_turn(samples[i - begin]), tok, o.stop_ids), records[i])
                    .status == reward::RewardStatus::correct)
          solved[i - begin] = true;
    }
    if (o.k > 0) any_correct += std::count(solved.begin(), solved.end(), true);
  }
  r.accuracy = double(correct) / double(records.size());
  r.mean_reward = reward_sum / double(records.size());
  if (o.k > 0) r.pass_at_k = double(any_correct) / double(records.size());
  return r;
}

}  // namespace unstuck::train
