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

namespace {

// One batch's completions scored in one call (a function's workers batch it), each by its last
// assistant turn, with its conversation when the tools ran.
std::vector<reward::RewardResult> score_completions(const std::vector<rollout::Completion>& outs,
                                                    const std::vector<nlohmann::json>& conversations,
                                                    const std::vector<const data::TaskRecord*>& records,
                                                    const tokenizer::Tokenizer& tok, const reward::Verifier& verifier,
                                                    const EvalOptions& o, std::vector<std::string>* texts) {
  texts->clear();
  std::vector<std::string> responses;  // tools: the whole completions (verl's solution_str)
  for (const rollout::Completion& c : outs) {
    texts->push_back(completion_text(last_assistant_turn(c), tok, o.stop_ids));
    if (o.turns) responses.push_back(tok.decode(c.tokens, true));
  }
  reward::ScoringContext context;
  context.stop = o.stop;
  context.environments = o.environments;
  if (o.turns) {
    context.conversations = &conversations;
    context.responses = &responses;
  }
  return verifier.score_batch(*texts, records, context);
}

}  // namespace

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
  if (o.turns) greedy.contexts = std::make_shared<rollout::KeptContexts>();  // tool rounds continue the caches
  rollout::GenerateOptions sampled = greedy;
  sampled.sampling.temperature = o.temperature;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  int64_t correct = 0, any_correct = 0;
  double reward_sum = 0;
  for (std::size_t begin = 0; begin < records.size(); begin += std::size_t(o.batch_size)) {
    const std::size_t end = std::min(records.size(), begin + std::size_t(o.batch_size));
    std::vector<const data::TaskRecord*> batch_records;
    for (std::size_t i = begin; i < end; ++i) batch_records.push_back(&records[i]);
    std::vector<std::vector<int32_t>> prompts;
    const auto start = [&] {  // each generation starts fresh episodes of the environment (when one is set)
      const std::vector<std::string> seen =
          o.observations ? o.observations(batch_records) : std::vector<std::string>(batch_records.size());
      prompts.clear();
      for (std::size_t i = 0; i < batch_records.size(); ++i)
        prompts.push_back(observed_prompt_ids(*batch_records[i], formatter, tok, seen[i],
                                              model.config().max_seq_len - o.max_new_tokens, o.environment));
    };
    start();
    auto outs = rollout::generate(model, prompts, greedy, gen);
    std::vector<nlohmann::json> conversations;
    if (o.turns) conversations = o.turns(prompts, outs, greedy);
    std::vector<std::string> texts;
    const std::vector<reward::RewardResult> scored =
        score_completions(outs, conversations, batch_records, tok, verifier, o, &texts);
    for (std::size_t i = begin; i < end; ++i) {
      const reward::RewardResult& res = scored[i - begin];
      reward_sum += res.reward;
      const bool ok = res.status == reward::RewardStatus::correct;
      correct += ok;
      ++r.statuses[config::enum_name(res.status)];
      if (r.examples.size() < 5)
        r.examples.push_back(formatter.render(records[i]) + " -> " + texts[i - begin] + " [" +
                             config::enum_name(res.status) + "]");
    }
    std::vector<bool> solved(end - begin, false);
    for (int64_t s = 0; s < o.k; ++s) {  // pass@k: scored as the greedy turns are, conversations included
      if (o.observations) start();
      auto samples = rollout::generate(model, prompts, sampled, gen);
      std::vector<nlohmann::json> sample_conversations;
      if (o.turns) sample_conversations = o.turns(prompts, samples, sampled);
      const std::vector<reward::RewardResult> sample_scores =
          score_completions(samples, sample_conversations, batch_records, tok, verifier, o, &texts);
      for (std::size_t i = 0; i < solved.size(); ++i)
        solved[i] = solved[i] || sample_scores[i].status == reward::RewardStatus::correct;
    }
    if (o.k > 0) any_correct += std::count(solved.begin(), solved.end(), true);
  }
  r.accuracy = double(correct) / double(records.size());
  r.mean_reward = reward_sum / double(records.size());
  if (o.k > 0) r.pass_at_k = double(any_correct) / double(records.size());
  return r;
}

}  // namespace unstuck::train
