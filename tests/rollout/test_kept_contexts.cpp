// Multi-turn rollouts continue each row from its KV cache (GenerateOptions::contexts): a row whose
// context was kept by the last call is prefilled only with what was appended since (its last
// sampled token and a tool's result), and samples what a fresh prefill of the whole context samples,
// in the dynamic and the fixed decode modes, with rows that stopped early (and left the decode batch),
// rows taken out of order, rows with no kept context and a context the prompt does not extend. Per-row
// completion limits (GenerateOptions::row_max_new) end each row at its own budget, so a round whose
// longest context + longest budget passes model.max_seq_len runs as long as each row fits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <memory>

#include "common/model_shape.h"
#include "unstuck/common/error.h"
#include "unstuck/rollout/sampler.h"

namespace unstuck::rollout {
namespace {

// A tiny GQA model (2 KV heads for 4 query heads) with a 96-token context.
model::LlamaModel make_model(int64_t max_seq_len = 96) {
  model::ModelConfig c = testing::model_shape(40, 48, 2, 4, 2, 64, max_seq_len);
  c.init_std = 0.2;
  torch::Tensor flat = torch::empty({model::llama_layout(c).total});
  model::init_llama_weights(model::llama_layout(c), c, flat, 3);
  return model::LlamaModel(c, flat);
}

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Same tokens and finish, log-probs within 1e-5 (FP32: the kept keys and a fresh prefill's differ by
// the summation order of their products only).
void expect_same(const std::vector<Completion>& a, const std::vector<Completion>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " row " << i;
    EXPECT_EQ(a[i].finish, b[i].finish) << what << " row " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << what << " row " << i;
    for (std::size_t t = 0; t < a[i].logprobs.size(); ++t)
      EXPECT_NEAR(a[i].logprobs[t], b[i].logprobs[t], 1e-5) << what << " row " << i << " token " << t;
  }
}

TEST(KeptContexts, ContinuedRowsSampleAsAFreshPrefillInEveryMode) {
  const model::LlamaModel m = make_model();
  // Four prompts of different lengths, two rows each (a shared prefill, left padding).
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 2 + 3 * i; ++j) p.push_back(int32_t(4 + (i * 7 + j * 3) % 36));
    prompts.push_back(p);
    prompts.push_back(p);
  }
  const std::vector<int64_t> first_rows = {0, 1, 2, 3, 4, 5, 6, 7};
  for (DecodeMode mode : {DecodeMode::dynamic, DecodeMode::fixed}) {
    const std::string what = mode == DecodeMode::dynamic ? "dynamic" : "fixed";
    GenerateOptions o;
    o.sampling.decode = mode;
    o.sampling.max_new_tokens = 16;
    o.uniforms = sampling_uniforms(7, 1, first_rows, 16, torch::kCPU);
    const std::vector<Completion> free_run = generate(m, prompts, o, gen(1));
    o.stop_ids = {free_run[0].tokens[3], free_run[5].tokens[2]};  // rows stop early and leave the batch
    o.contexts = std::make_shared<KeptContexts>();
    const std::vector<Completion> first = generate(m, prompts, o, gen(1));
    int64_t stopped = 0;
    for (const Completion& c : first) stopped += c.finish == FinishReason::eos && c.tokens.size() < 12;
    ASSERT_GE(stopped, 2) << what << ": fixture: some rows must stop early";
    ASSERT_EQ(o.contexts->ids.size(), prompts.size()) << what;
    for (std::size_t j = 0; j < o.contexts->ids.size(); ++j) {  // a row's context: all but its last token
      const std::size_t i = std::size_t(o.contexts->ids[j]);
      std::vector<int32_t> expected = joined(prompts[i], first[i].tokens);
      expected.pop_back();
      EXPECT_EQ(o.contexts->tokens[j], expected) << what << " kept row " << j;
    }
    // A tool round: rows 6, 1 and 3 (out of order) get results of different lengths appended; row 99
    // was never kept and row 5's prompt does not extend its context: both are prefilled whole.
    const std::vector<int64_t> ids = {6, 1, 99, 3, 5};
    const std::vector<std::vector<int32_t>> results = {{30, 31, 32}, {33}, {}, {34, 35, 36, 37, 38}, {}};
    std::vector<std::vector<int32_t>> round;
    int64_t appended = 0;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] == 99) {
        round.push_back({9, 8, 7, 6});
        appended += 4;
      } else if (ids[k] == 5) {
        round.push_back(joined({11}, first[5].tokens));  // not its context
        appended += int64_t(round.back().size());
      } else {
        round.push_back(joined(joined(prompts[std::size_t(ids[k])], first[std::size_t(ids[k])].tokens), results[k]));
        appended += 1 + int64_t(results[k].size());
      }
    }
    GenerateOptions next = o;
    next.sampling.max_new_tokens = 12;
    next.row_max_new = {12, 5, 9, 12, 7};
    next.uniforms = sampling_uniforms(7, 2, ids, 12, torch::kCPU);
    next.row_ids = ids;
    GenerateOptions fresh = next;
    fresh.contexts = nullptr;
    const std::vector<Completion> expected = generate(m, round, fresh, gen(1));
    const std::vector<Completion> continued = generate(m, round, next, gen(1));
    expect_same(continued, expected, what + " round 2");
    int64_t computed = 0;
    for (int64_t n : next.contexts->computed) computed += n;
    EXPECT_EQ(computed, appended) << what << ": only the appended tokens are computed";
    for (std::size_t k = 0; k < ids.size(); ++k)
      EXPECT_LE(int64_t(continued[k].tokens.size()), next.row_max_new[k]) << what << " row " << k;
    // A third round continues row 1 from the second round's cache.
    const std::vector<std::vector<int32_t>> third = {joined(joined(round[1], continued[1].tokens), {20, 21})};
    GenerateOptions last = next;
    last.row_max_new.clear();
    last.row_ids = {1};
    last.uniforms = sampling_uniforms(7, 3, {1}, 12, torch::kCPU);
    fresh = last;
    fresh.contexts = nullptr;
    const std::vector<Completion> again = generate(m, third, fresh, gen(1));
    expect_same(generate(m, third, last, gen(1)), again, what + " round 3");
    EXPECT_EQ(last.contexts->computed, std::vector<int64_t>{3}) << what;
  }
}

// Row limits: a long prompt with a short budget beside a short prompt with a long one fits, though
// the longest prompt + the longest budget does not; each row samples what it samples alone.
TEST(KeptContexts, EachRowStopsAtItsOwnLimit) {
  const model::LlamaModel m = make_model(40);
  std::vector<int32_t> long_prompt;
  for (int j = 0; j < 30; ++j) long_prompt.push_back(int32_t(4 + (j * 5) % 36));
  const std::vector<std::vector<int32_t>> prompts = {long_prompt, {5, 6, 7}};
  for (DecodeMode mode : {DecodeMode::dynamic, DecodeMode::fixed}) {
    GenerateOptions o;
    o.sampling.decode = mode;
    o.sampling.max_new_tokens = 16;
    o.row_max_new = {6, 16};  // 30 + 6 and 3 + 16 fit 40; 30 + 16 would not
    o.uniforms = sampling_uniforms(3, 1, {0, 1}, 16, torch::kCPU);
    const std::vector<Completion> both = generate(m, prompts, o, gen(1));
    EXPECT_EQ(both[0].tokens.size(), 6u);
    EXPECT_EQ(both[0].finish, FinishReason::length);
    EXPECT_EQ(both[1].tokens.size(), 16u);
    for (std::size_t b = 0; b < 2; ++b) {
      GenerateOptions alone;
      alone.sampling.decode = mode;
      alone.sampling.max_new_tokens = o.row_max_new[b];
      alone.uniforms = o.uniforms.narrow(0, int64_t(b), 1);
      expect_same(generate(m, {prompts[b]}, alone, gen(1)), {both[b]}, "row " + std::to_string(b));
    }
  }
  GenerateOptions o;
  o.sampling.max_new_tokens = 16;
  o.row_max_new = {11, 16};  // 30 + 11 > 40
  EXPECT_THROW(generate(m, prompts, o, gen(1)), UserError);
  o.row_max_new = {0, 16};
  EXPECT_THROW(generate(m, prompts, o, gen(1)), std::invalid_argument);
}

}  // namespace
}  // namespace unstuck::rollout
