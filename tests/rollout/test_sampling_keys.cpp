// Counter-based sampling: the uniforms are a pure function of (seed, step, global row, position)
// with a known answer; a row samples the same tokens alone, in a batch of 8, or split across
// "ranks"; dropping finished rows from the decode batch changes no token; CUDA (when present)
// samples the CPU's tokens.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "unstuck/rollout/sampler.h"
#include "unstuck/rollout/sampling_uniform.h"
#include "common/model_shape.h"

namespace unstuck::rollout {
namespace {

model::LlamaModel make_model(torch::Device device = torch::kCPU) {
  model::ModelConfig c = testing::model_shape(40, 48, 2, 4, 2, 64, 64);
  c.init_std = 0.2;
  torch::Tensor flat = torch::empty({model::llama_layout(c).total});
  model::init_llama_weights(model::llama_layout(c), c, flat, 3);
  return model::LlamaModel(c, flat.to(device));
}

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

std::vector<std::vector<int32_t>> prompts(int64_t n) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int64_t j = 0; j < 2 + i % 5; ++j) p.push_back(int32_t(4 + (i * 7 + j * 3) % 36));
    out.push_back(p);
  }
  return out;
}

TEST(SamplingKeys, UniformIsKeyedAndHasAKnownAnswer) {
  // Random123's Philox4x32-10 known answer for key 0, counter 0: {0x6627e8d5, 0xe169c58d, ...}.
  EXPECT_EQ(sampling_uniform(0, 0, 0, 0), float(0x6627e8) / 16777216.0f);
  EXPECT_EQ(sampling_uniform(0, 0, 0, 1), float(0xe169c5) / 16777216.0f);
  // Each of seed, step, row and position changes the value.
  const float u = sampling_uniform(7, 3, 11, 5);
  EXPECT_NE(u, sampling_uniform(8, 3, 11, 5));
  EXPECT_NE(u, sampling_uniform(7, 4, 11, 5));
  EXPECT_NE(u, sampling_uniform(7, 3, 12, 5));
  EXPECT_NE(u, sampling_uniform(7, 3, 11, 6));
  EXPECT_NE(sampling_uniform(7, 3, 11, 5), sampling_uniform(7, 3, 11 + (uint64_t(1) << 32), 5));
  // The tensor form is the scalar function at the given global rows; in [0, 1), mean 1/2.
  const torch::Tensor mine = sampling_uniforms(7, 3, {5, 2}, 9, torch::kCPU);
  const torch::Tensor all = sampling_uniforms(7, 3, {0, 1, 2, 3, 4, 5}, 9, torch::kCPU);
  EXPECT_TRUE(torch::equal(mine[0], all[5]));
  EXPECT_TRUE(torch::equal(mine[1], all[2]));
  EXPECT_EQ(mine[0][4].item<float>(), sampling_uniform(7, 3, 5, 4));
  std::vector<int64_t> rows(1000);
  for (int64_t i = 0; i < 1000; ++i) rows[std::size_t(i)] = i;
  const torch::Tensor many = sampling_uniforms(1, 1, rows, 100, torch::kCPU);  // 1e5 values
  EXPECT_GE(many.min().item<float>(), 0.0f);
  EXPECT_LT(many.max().item<float>(), 1.0f);
  EXPECT_NEAR(many.mean().item<double>(), 0.5, 5 * std::sqrt(1.0 / 12 / 1e5));  // 5 standard errors
}

// A row's tokens depend only on its key: alone (batch of 1), in a batch of 8 with other prompts, or
// in either half of the batch (two data-parallel ranks), with top-k and top-p on.
TEST(SamplingKeys, RowTokensDoNotDependOnTheBatch) {
  const model::LlamaModel m = make_model();
  const auto ps = prompts(8);
  std::vector<int64_t> rows(8);
  for (int64_t i = 0; i < 8; ++i) rows[std::size_t(i)] = 100 + i;  // global rows of a later rank
  GenerateOptions o;
  o.sampling.max_new_tokens = 12;
  o.sampling.top_k = 20;
  o.sampling.top_p = 0.95;
  o.uniforms = sampling_uniforms(42, 9, rows, 12, torch::kCPU);
  const auto batch = generate(m, ps, o, gen(0));
  for (int64_t b = 0; b < 8; ++b) {
    GenerateOptions one = o;
    one.uniforms = sampling_uniforms(42, 9, {rows[std::size_t(b)]}, 12, torch::kCPU);
    EXPECT_EQ(generate(m, {ps[std::size_t(b)]}, one, gen(1))[0].tokens, batch[std::size_t(b)].tokens) << b;
  }
  for (int64_t half : {0, 1}) {
    const std::vector<int64_t> my_rows(rows.begin() + 4 * half, rows.begin() + 4 * half + 4);
    GenerateOptions rank = o;
    rank.uniforms = sampling_uniforms(42, 9, my_rows, 12, torch::kCPU);
    const auto outs = generate(m, {ps.begin() + 4 * half, ps.begin() + 4 * half + 4}, rank, gen(2));
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(outs[std::size_t(i)].tokens, batch[std::size_t(4 * half + i)].tokens);
  }
  bool differ = false;  // and the rows do differ from each other (the key matters)
  for (int64_t b = 1; b < 8; ++b) differ = differ || batch[std::size_t(b)].tokens != batch[0].tokens;
  EXPECT_TRUE(differ);
}

// With an EOS that rows hit at different steps, dropping finished rows (and compacting the KV
// cache) gives the tokens, finish reasons and log-probs of decoding every row to the end.
TEST(SamplingKeys, DroppingFinishedRowsChangesNoToken) {
  const model::LlamaModel m = make_model();
  const auto ps = prompts(32);
  std::vector<int64_t> rows(32);
  for (int64_t i = 0; i < 32; ++i) rows[std::size_t(i)] = i;
  for (bool cached : {true, false}) {
    GenerateOptions o;
    o.sampling.max_new_tokens = 24;
    o.use_cache = cached;
    o.uniforms = sampling_uniforms(5, 1, rows, 24, torch::kCPU);
    o.stop_ids = {7};
    o.drop_finished = false;
    const auto kept = generate(m, ps, o, gen(0));
    o.drop_finished = true;
    const auto dropped = generate(m, ps, o, gen(0));
    int64_t eos = 0, lengths = 0;
    for (std::size_t b = 0; b < ps.size(); ++b) {
      EXPECT_EQ(dropped[b].tokens, kept[b].tokens) << b;
      EXPECT_EQ(dropped[b].finish, kept[b].finish) << b;
      for (std::size_t t = 0; t < kept[b].logprobs.size() && t < dropped[b].logprobs.size(); ++t)
        EXPECT_NEAR(dropped[b].logprobs[t], kept[b].logprobs[t], 1e-5);
      eos += kept[b].finish == FinishReason::eos;
      lengths += int64_t(kept[b].tokens.size());
    }
    // The fixture exercises what it claims: many rows stop early, at different steps.
    EXPECT_GE(eos, 8) << "cached " << cached;
    EXPECT_LT(lengths, 32 * 24 - 100) << "cached " << cached;
  }
}

// Reading the finished-row count only every k decode steps (CUDA's default is 8, so the GPU is not
// stalled per token) changes no token, finish reason or log-prob: rows finished in between keep
// sampling unread, and the dropping of finished rows only happens later.
TEST(SamplingKeys, SparseStopChecksChangeNoToken) {
  const model::LlamaModel m = make_model();
  const auto ps = prompts(32);
  std::vector<int64_t> rows(32);
  for (int64_t i = 0; i < 32; ++i) rows[std::size_t(i)] = i;
  GenerateOptions o;
  o.sampling.max_new_tokens = 24;
  o.uniforms = sampling_uniforms(5, 1, rows, 24, torch::kCPU);
  o.stop_ids = {7};
  o.stop_check_every = 1;
  const auto every = generate(m, ps, o, gen(0));
  int64_t stopped = 0;
  for (const auto& c : every) stopped += c.finish == FinishReason::eos;
  EXPECT_GE(stopped, 8);  // the fixture has rows that stop, at different steps
  for (int64_t k : {3, 8, 100}) {
    o.stop_check_every = k;
    const auto sparse = generate(m, ps, o, gen(0));
    for (std::size_t b = 0; b < ps.size(); ++b) {
      EXPECT_EQ(sparse[b].tokens, every[b].tokens) << "k " << k << " row " << b;
      EXPECT_EQ(sparse[b].finish, every[b].finish) << "k " << k << " row " << b;
      for (std::size_t t = 0; t < sparse[b].logprobs.size() && t < every[b].logprobs.size(); ++t)
        EXPECT_NEAR(sparse[b].logprobs[t], every[b].logprobs[t], 1e-5);
    }
  }
  o.stop_check_every = -1;
  EXPECT_THROW(generate(m, ps, o, gen(0)), std::invalid_argument);
}

// The same logits on CUDA and CPU draw the same tokens (skipped without a device).
TEST(SamplingKeys, CudaSamplesTheCpuTokens) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const model::LlamaModel cpu = make_model(), gpu = make_model(torch::kCUDA);
  const auto ps = prompts(8);
  GenerateOptions o;
  o.sampling.max_new_tokens = 16;
  o.stop_ids = {7};
  o.uniforms = sampling_uniforms(3, 2, {0, 1, 2, 3, 4, 5, 6, 7}, 16, torch::kCPU);
  const auto a = generate(cpu, ps, o, gen(0));
  o.uniforms = o.uniforms.cuda();
  const auto b = generate(gpu, ps, o, gen(0));
  for (std::size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
}

}  // namespace
}  // namespace unstuck::rollout
