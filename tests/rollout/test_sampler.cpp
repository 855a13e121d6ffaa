// Rollout engine: cached and recomputing paths sample the same tokens, seeds make runs repeatable,
// top-k 1 is greedy, EOS and length finish reasons, and the kept log-probs equal a fresh forward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "unstuck/common/error.h"
#include "unstuck/rollout/sampler.h"
#include "common/model_shape.h"

namespace unstuck::rollout {
namespace {

using model::LlamaModel;

model::ModelConfig config() {
  model::ModelConfig c = testing::model_shape(40, 48, 2, 4, 4, 64, 48);
  c.init_std = 0.2;  // peaked distributions, so greedy choices are well separated
  return c;
}

LlamaModel make_model(torch::Tensor* flat_out = nullptr) {
  const model::ModelConfig c = config();
  torch::Tensor flat = torch::empty({model::llama_layout(c).total});
  model::init_llama_weights(model::llama_layout(c), c, flat, 3);
  if (flat_out) *flat_out = flat;
  return LlamaModel(c, flat);
}

const std::vector<std::vector<int32_t>> kPrompts = {{5, 6, 7}, {8, 9, 10, 11, 12, 13}, {14}};

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

TEST(Sampler, CacheAndRecomputeSampleTheSameTokens) {
  LlamaModel m = make_model();
  for (double temperature : {0.0, 1.0}) {
    GenerateOptions o;
    o.sampling.temperature = temperature;
    o.sampling.max_new_tokens = 12;
    const auto cached = generate(m, kPrompts, o, gen(11));
    o.use_cache = false;
    const auto full = generate(m, kPrompts, o, gen(11));
    for (std::size_t b = 0; b < kPrompts.size(); ++b) {
      EXPECT_EQ(cached[b].tokens, full[b].tokens) << "temperature " << temperature << " row " << b;
      for (std::size_t t = 0; t < cached[b].logprobs.size(); ++t)
        EXPECT_NEAR(cached[b].logprobs[t], full[b].logprobs[t], 1e-4);
    }
  }
}

TEST(Sampler, SeedsAreRepeatableAndDistinct) {
  LlamaModel m = make_model();
  GenerateOptions o;
  o.sampling.max_new_tokens = 16;
  const auto a = generate(m, kPrompts, o, gen(1));
  const auto b = generate(m, kPrompts, o, gen(1));
  const auto c = generate(m, kPrompts, o, gen(2));
  bool any_diff = false;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    any_diff = any_diff || a[i].tokens != c[i].tokens;
  }
  EXPECT_TRUE(any_diff);
}

TEST(Sampler, TopKOneIsGreedy) {
  LlamaModel m = make_model();
  GenerateOptions greedy, topk;
  greedy.sampling.temperature = 0;
  topk.sampling.top_k = 1;
  topk.sampling.top_p = 0.9;
  const auto g = generate(m, kPrompts, greedy, gen(4));
  const auto k = generate(m, kPrompts, topk, gen(5));
  for (std::size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(g[i].tokens, k[i].tokens);
}

TEST(Sampler, StopsAtEosAndReportsLength) {
  LlamaModel m = make_model();
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_new_tokens = 5;
  const auto before = generate(m, kPrompts, o, gen(1));  // no EOS: every row runs to the limit
  for (const auto& c : before) {
    EXPECT_EQ(c.finish, FinishReason::length);
    EXPECT_EQ(c.tokens.size(), 5u);
  }
  // Declare row 0's first greedy token the EOS: row 0 stops right there, and any row that emits it
  // ends with it.
  const int32_t eos = before[0].tokens[0];
  o.stop_ids = {eos};
  const auto after = generate(m, kPrompts, o, gen(1));
  EXPECT_EQ(after[0].finish, FinishReason::eos);
  EXPECT_EQ(after[0].tokens, std::vector<int32_t>{eos});
  for (std::size_t b = 0; b < after.size(); ++b) {
    const auto& t = after[b].tokens;
    const auto first_eos = std::find(t.begin(), t.end(), eos);
    if (first_eos == t.end()) {
      EXPECT_EQ(after[b].finish, FinishReason::length);
    } else {
      EXPECT_EQ(after[b].finish, FinishReason::eos);
      EXPECT_EQ(first_eos + 1, t.end()) << "row " << b << " continued after EOS";
    }
    // Up to the EOS, the tokens are those of the run without EOS.
    EXPECT_TRUE(std::equal(t.begin(), t.end(), before[b].tokens.begin()));
  }
}

// Several stop tokens (Llama 3 Instruct's <|eot_id|>, <|end_of_text|>): each row ends at the first
// one it samples, whichever of them it is, with the cache and without.
TEST(Sampler, StopsAtTheFirstOfSeveralStopTokens) {
  LlamaModel m = make_model();
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_new_tokens = 6;
  const auto free_run = generate(m, kPrompts, o, gen(1));
  // Stop at row 0's second greedy token and at row 1's third: two rows end at different stops.
  const std::vector<int32_t> stops = {free_run[0].tokens[1], free_run[1].tokens[2]};
  ASSERT_NE(stops[0], stops[1]) << "fixture: pick prompts whose greedy tokens differ";
  for (bool cached : {true, false}) {
    o.use_cache = cached;
    o.stop_ids = stops;
    const auto out = generate(m, kPrompts, o, gen(1));
    int64_t ended = 0;
    for (std::size_t b = 0; b < out.size(); ++b) {
      const auto& free = free_run[b].tokens;
      const auto first = std::find_first_of(free.begin(), free.end(), stops.begin(), stops.end());
      const std::vector<int32_t> expect(free.begin(), first == free.end() ? free.end() : first + 1);
      EXPECT_EQ(out[b].tokens, expect) << "row " << b << " cached " << cached;
      EXPECT_EQ(out[b].finish, first == free.end() ? FinishReason::length : FinishReason::eos) << b;
      ended += first != free.end();
    }
    EXPECT_LE(out[0].tokens.size(), 2u);
    EXPECT_LE(out[1].tokens.size(), 3u);
    EXPECT_GE(ended, 2);
  }
}

// Groups of rows with one prompt (GRPO) share one prefill: the same tokens, finish reasons and
// log-probs (within 1e-5) as prefilling every row, with padded prompts, stop tokens that drop
// rows mid-way, and a prompt that recurs after another (rows are shared only when consecutive).
TEST(Sampler, SharedPrefillSamplesAsEveryRowPrefilled) {
  LlamaModel m = make_model();
  std::vector<std::vector<int32_t>> prompts;
  for (int g = 0; g < 4; ++g) prompts.push_back(kPrompts[0]);
  for (int g = 0; g < 3; ++g) prompts.push_back(kPrompts[1]);
  prompts.push_back(kPrompts[2]);
  for (int g = 0; g < 2; ++g) prompts.push_back(kPrompts[0]);
  GenerateOptions o;
  o.sampling.max_new_tokens = 10;
  std::vector<int64_t> rows(prompts.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = int64_t(i);
  o.uniforms = sampling_uniforms(5, 1, rows, 10, torch::kCPU);
  const auto free_run = generate(m, prompts, o, gen(1));
  o.stop_ids = {free_run[0].tokens[2], free_run[5].tokens[1]};
  for (bool cached : {true, false}) {
    o.use_cache = cached;
    o.share_prompts = false;
    const auto each = generate(m, prompts, o, gen(1));
    o.share_prompts = true;
    const auto shared = generate(m, prompts, o, gen(1));
    int64_t stopped = 0;
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      EXPECT_EQ(shared[b].tokens, each[b].tokens) << "row " << b << " cached " << cached;
      EXPECT_EQ(shared[b].finish, each[b].finish) << "row " << b;
      ASSERT_EQ(shared[b].logprobs.size(), each[b].logprobs.size());
      for (std::size_t t = 0; t < each[b].logprobs.size(); ++t)
        EXPECT_NEAR(shared[b].logprobs[t], each[b].logprobs[t], 1e-5) << "row " << b << " token " << t;
      stopped += each[b].finish == FinishReason::eos;
    }
    EXPECT_GE(stopped, 2) << "fixture: some rows must stop early";
  }
}

// The log-probs kept at sampling time equal log_softmax of a fresh full forward on prompt +
// completion (FP32), i.e. logprob_mismatch is ~0 when sampling and training use the same weights.
TEST(Sampler, KeptLogprobsMatchFreshForward) {
  LlamaModel m = make_model();
  GenerateOptions o;
  o.sampling.max_new_tokens = 10;
  const auto out = generate(m, kPrompts, o, gen(8));
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < kPrompts.size(); ++b) {
    std::vector<int64_t> seq(kPrompts[b].begin(), kPrompts[b].end());
    seq.insert(seq.end(), out[b].tokens.begin(), out[b].tokens.end());
    const torch::Tensor logp = torch::log_softmax(m.forward(torch::tensor(seq).unsqueeze(0)), -1)[0];
    for (std::size_t t = 0; t < out[b].tokens.size(); ++t) {
      const int64_t pos = int64_t(kPrompts[b].size() + t) - 1;
      EXPECT_NEAR(logp[pos][out[b].tokens[t]].item<float>(), out[b].logprobs[t], 1e-4);
    }
  }
}

TEST(Sampler, RejectsBadOptions) {
  LlamaModel m = make_model();
  GenerateOptions o;
  o.sampling.top_p = 0;
  EXPECT_THROW(generate(m, kPrompts, o, gen(1)), UserError);
  o = {};
  o.sampling.max_new_tokens = 100;  // beyond max_seq_len
  EXPECT_THROW(generate(m, kPrompts, o, gen(1)), UserError);
}

}  // namespace
}  // namespace unstuck::rollout

namespace unstuck::rollout {
namespace {

// Inverse-CDF sampling from given uniforms (what data-parallel GRPO uses): the token frequencies
// over 6000 rows of one prompt match the softmax of the first-step logits (each within 5 standard
// errors), filtered tokens (top-k) are never drawn, and a row's tokens do not depend on which other
// rows share its batch.
TEST(Sampler, UniformsDrawTokensByInverseCdf) {
  LlamaModel m = make_model();
  const int64_t B = 6000, V = m.config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts(std::size_t(B), kPrompts[0]);
  GenerateOptions o;
  o.sampling.max_new_tokens = 1;
  o.uniforms = torch::rand({B, 1}, gen(5));
  const auto outs = generate(m, prompts, o, gen(0));
  torch::Tensor p;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor tokens =
        torch::tensor(std::vector<int64_t>(kPrompts[0].begin(), kPrompts[0].end())).unsqueeze(0);
    p = torch::softmax(m.forward(tokens).select(1, int64_t(kPrompts[0].size()) - 1).squeeze(0), -1);
  }
  std::vector<double> count(std::size_t(V), 0.0);
  for (const auto& c : outs) count[std::size_t(c.tokens[0])] += 1;
  for (int64_t v = 0; v < V; ++v) {
    const double pv = p[v].item<double>(), se = std::sqrt(pv * (1 - pv) / double(B));
    EXPECT_NEAR(count[std::size_t(v)] / double(B), pv, 5 * se + 1e-9) << "token " << v;
  }
  o.sampling.top_k = 2;
  const auto top = std::get<1>(p.topk(2));
  for (const auto& c : generate(m, prompts, o, gen(0)))
    EXPECT_TRUE(c.tokens[0] == top[0].item<int64_t>() || c.tokens[0] == top[1].item<int64_t>());

  // Rows 0..2 alone vs inside a batch with other prompts before them: same tokens.
  GenerateOptions o2;
  o2.sampling.max_new_tokens = 8;
  o2.uniforms = torch::rand({3, 8}, gen(9));
  const auto alone = generate(m, kPrompts, o2, gen(0));
  std::vector<std::vector<int32_t>> more = {{20, 21}, {22}};
  more.insert(more.end(), kPrompts.begin(), kPrompts.end());
  o2.uniforms = torch::cat({torch::rand({2, 8}, gen(10)), o2.uniforms});
  const auto batched = generate(m, more, o2, gen(1));
  for (std::size_t b = 0; b < kPrompts.size(); ++b) EXPECT_EQ(alone[b].tokens, batched[b + 2].tokens) << b;
}

}  // namespace
}  // namespace unstuck::rollout
