// GrpoTrainer's tool rounds (tools.functions): the hooks of rollout::run_tool_turns on this trainer's
// model, tokenizer, chat template and sampling uniforms.
#include "train/grpo_trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "unstuck/common/error.h"

#include "train/grpo_internal.h"
#include "train/tool_turns.h"

namespace unstuck::train {

rollout::ToolTurnHooks GrpoTrainer::tool_hooks() const {
  return tool_turn_hooks(ctx_.tokenizer, prompt_format(), tools_, stop_flag_);
}

void GrpoTrainer::start_environments(Rollouts& ro) {
  std::vector<nlohmann::json> rows;
  for (const data::TaskRecord* r : ro.records) rows.push_back(environment_row(*r));
  const std::vector<std::string> seen = tools_->reset_environments(rows, stop_flag_);
  const int64_t room = weights_.model().config().max_seq_len - cfg_.rollout.max_new_tokens;
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (!seen[i].empty())
      ro.prompts[i] = observed_prompt_ids(*ro.records[i], prompt_format(), ctx_.tokenizer, seen[i], room,
                                          tools_->environment_class());
}

rollout::ToolTurnLimits GrpoTrainer::tool_limits() const {
  return tool_turn_limits(cfg_.tools, cfg_.rollout.max_new_tokens, weights_.model().config().max_seq_len);
}

void GrpoTrainer::run_tools(Rollouts& ro, std::shared_ptr<rollout::KeptContexts> contexts) {
  const torch::Tensor uniforms = gen_opts_.uniforms.to(torch::kCPU);  // (rows, max_new_tokens)
  rollout::ToolTurnHooks hooks = tool_hooks();
  std::vector<int64_t> computed(ro.completions.size(), 0);  // per row: context tokens its rounds computed
  hooks.generate = [&](const std::vector<int64_t>& rows, const std::vector<std::vector<int32_t>>& prompts,
                       const std::vector<int64_t>& offset, const std::vector<int64_t>& max_new) {
    const int64_t n = int64_t(rows.size()), T = *std::max_element(max_new.begin(), max_new.end());
    torch::Tensor u = torch::zeros({n, T}, torch::kFloat);
    for (int64_t k = 0; k < n; ++k) {  // row k's uniforms from its offset (a row never reuses one)
      const int64_t len = std::min(T, uniforms.size(1) - offset[std::size_t(k)]);
      u[k].narrow(0, 0, len).copy_(uniforms[rows[std::size_t(k)]].narrow(0, offset[std::size_t(k)], len));
    }
    rollout::GenerateOptions o = gen_opts_;
    o.progress = nullptr;
    o.sampling.max_new_tokens = T;
    o.row_max_new = max_new;
    o.uniforms = u.to(device_);
    o.contexts = contexts;  // each row continues from its cache: only the last token and the results are computed
    o.row_ids = rows;
    std::vector<rollout::Completion> out = rollout::generate(weights_.model(), prompts, o, sampling_);
    for (std::size_t k = 0; k < rows.size(); ++k)
      computed[std::size_t(rows[k])] += contexts->computed.empty() ? int64_t(prompts[k].size()) : contexts->computed[k];
    return out;
  };
  ro.tool_stats = rollout::run_tool_turns(ro.prompts, ro.completions, hooks, tool_limits());
  for (std::size_t i = 0; i < computed.size(); ++i) ro.tool_stats[i].context_tokens = computed[i];
}

namespace {

// A completion as its runs of the policy's tokens and the tools' ([{"from": "policy" | "tools",
// "text"}]), special tokens kept.
nlohmann::json turns_of(const rollout::Completion& c, const tokenizer::Tokenizer& tok) {
  nlohmann::json turns = nlohmann::json::array();
  std::size_t begin = 0;
  for (std::size_t t = 1; t <= c.tokens.size(); ++t) {
    const auto tool = [&](std::size_t i) { return !c.from_tool.empty() && c.from_tool[i] != 0; };
    if (t < c.tokens.size() && tool(t) == tool(begin)) continue;
    turns.push_back(
        {{"from", tool(begin) ? "tools" : "policy"},
         {"text",
          tok.decode({c.tokens.begin() + std::ptrdiff_t(begin), c.tokens.begin() + std::ptrdiff_t(t)}, false)}});
    begin = t;
  }
  return turns;
}

}  // namespace

void GrpoTrainer::log_rollouts(int64_t step, const Rollouts& ro, const Scores& sc) const {
  const std::string name =
      comm_.rank() == 0 ? "rollouts.jsonl" : "rollouts-rank" + std::to_string(comm_.rank()) + ".jsonl";
  std::ofstream out(ctx_.run_dir / name, std::ios::app);
  if (!out) throw UserError("grpo.log_rollouts_every: cannot append to " + (ctx_.run_dir / name).string());
  const std::vector<int64_t>& rows = rows_of_[std::size_t(comm_.rank())];
  for (std::size_t i = 0; i < ro.completions.size(); ++i) {
    const rollout::Completion& c = ro.completions[i];
    nlohmann::json line = {{"step", step},
                           {"row", i < rows.size() ? rows[i] : int64_t(i)},
                           {"prompt", ctx_.tokenizer.decode(ro.prompts[i], false)},
                           {"completion", ctx_.tokenizer.decode(c.tokens, false)},
                           {"finish", c.finish == rollout::FinishReason::eos ? "eos" : "length"},
                           {"reward", sc.rewards[i]},
                           {"correct", sc.right[i] != 0}};
    if (!ro.tool_stats.empty()) {
      const rollout::ToolTurnStats& t = ro.tool_stats[i];
      line["turns"] = turns_of(c, ctx_.tokenizer);
      line["messages"] = t.messages;
      line["tool_calls"] = t.calls;
      line["tool_failures"] = t.failures;
    }
    out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  if (!out) throw UserError("grpo.log_rollouts_every: writing " + (ctx_.run_dir / name).string() + " failed");
}

}  // namespace unstuck::train
