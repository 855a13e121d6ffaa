// GrpoTrainer's tool rounds (tools.functions): the hooks of rollout::run_tool_turns on this trainer's
// model, tokenizer, chat template and sampling uniforms.
#include "train/grpo_trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "train/grpo_internal.h"

namespace unstuck::train {

void GrpoTrainer::run_tools(Rollouts& ro) {
  const torch::Tensor uniforms = gen_opts_.uniforms.to(torch::kCPU);  // (rows, max_new_tokens)
  rollout::ToolTurnHooks hooks;
  hooks.decode = [this](const std::vector<int32_t>& ids) { return ctx_.tokenizer.decode(ids, false); };
  hooks.run = [this](const std::vector<std::vector<rollout::ToolCall>>& calls) {
    std::vector<rollout::ToolCall> flat;
    for (const auto& row : calls) flat.insert(flat.end(), row.begin(), row.end());
    const std::vector<rollout::ToolOutcome> results = tools_->call(flat, stop_flag_);
    std::vector<std::vector<rollout::ToolOutcome>> out;
    std::size_t at = 0;
    for (const auto& row : calls) {
      out.emplace_back(results.begin() + std::ptrdiff_t(at), results.begin() + std::ptrdiff_t(at + row.size()));
      at += row.size();
    }
    return out;
  };
  hooks.suffix = [this](const std::vector<rollout::ToolCall>& calls, const std::vector<rollout::ToolOutcome>& results) {
    return rollout::tool_result_tokens(prompt_format(), ctx_.tokenizer, calls, results);
  };
  hooks.generate = [&](const std::vector<int64_t>& rows, const std::vector<std::vector<int32_t>>& contexts,
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
    o.uniforms = u.to(device_);
    return rollout::generate(weights_.model(), contexts, o, sampling_);
  };
  rollout::ToolTurnLimits limits;
  limits.max_iterations = cfg_.tools.max_iterations;
  limits.max_new_tokens = cfg_.rollout.max_new_tokens;
  limits.max_context = weights_.model().config().max_seq_len;
  ro.tool_stats = rollout::run_tool_turns(ro.prompts, ro.completions, hooks, limits);
}

}  // namespace unstuck::train
