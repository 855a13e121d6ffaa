// Fixed-shape decoding (rollout.decode: fixed and graphs): the row buckets, and that the fixed steps
// (the CUDA graphs' exact fallback, run op by op) sample the dynamic steps' tokens on the CPU with
// padded prompts, shared prefills, stop tokens that shrink the batch through several buckets and
// completions that cross the attention's slot buckets. On a CUDA device: the replayed graphs give
// the fixed steps' bits, and the fixed steps the CPU's tokens.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <set>

#include "common/error_of.h"
#include "unstuck/common/error.h"
#include "unstuck/rollout/sampler.h"
#include "common/model_shape.h"

namespace unstuck::rollout {
namespace {

// A tiny GQA model whose context holds completions longer than the fixed steps' 128-slot buckets.
model::LlamaModel make_model(torch::Device device = torch::kCPU, torch::ScalarType dtype = torch::kFloat32) {
  model::ModelConfig c = testing::model_shape(40, 48, 2, 4, 2, 64, 320);
  c.init_std = 0.2;
  torch::Tensor flat = torch::empty({model::llama_layout(c).total});
  model::init_llama_weights(model::llama_layout(c), c, flat, 3);
  return model::LlamaModel(c, flat.to(device, dtype));
}

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// `groups` prompts of different lengths (left padding), each repeated `group` times (a shared prefill).
std::vector<std::vector<int32_t>> grouped_prompts(int64_t groups, int64_t group) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < groups; ++i) {
    std::vector<int32_t> p;
    for (int64_t j = 0; j < 2 + i % 7; ++j) p.push_back(int32_t(4 + (i * 7 + j * 3) % 36));
    for (int64_t g = 0; g < group; ++g) out.push_back(p);
  }
  return out;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(std::size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = i;
  return v;
}

void expect_same(const std::vector<Completion>& a, const std::vector<Completion>& b, double logp_tol,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t r = 0; r < a.size(); ++r) {
    EXPECT_EQ(a[r].tokens, b[r].tokens) << what << " row " << r;
    EXPECT_EQ(a[r].finish, b[r].finish) << what << " row " << r;
    for (std::size_t t = 0; t < a[r].logprobs.size() && t < b[r].logprobs.size(); ++t)
      if (logp_tol == 0)
        EXPECT_EQ(a[r].logprobs[t], b[r].logprobs[t]) << what << " row " << r << " token " << t;
      else
        EXPECT_NEAR(a[r].logprobs[t], b[r].logprobs[t], logp_tol) << what << " row " << r << " token " << t;
  }
}

TEST(FixedDecode, BucketsAreFewAndWasteLittle) {
  EXPECT_EQ(decode_bucket(256, 256), 256);
  EXPECT_EQ(decode_bucket(200, 256), 224);
  EXPECT_EQ(decode_bucket(129, 256), 160);
  EXPECT_EQ(decode_bucket(128, 256), 128);
  EXPECT_EQ(decode_bucket(100, 256), 112);
  EXPECT_EQ(decode_bucket(9, 256), 16);
  EXPECT_EQ(decode_bucket(3, 256), 8);
  EXPECT_EQ(decode_bucket(3, 5), 5);        // never more rows than the batch
  EXPECT_EQ(decode_bucket(300, 300), 300);  // the whole batch is its own bucket
  std::set<int64_t> shapes;
  for (int64_t rows = 1; rows <= 256; ++rows) {
    const int64_t b = decode_bucket(rows, 256);
    EXPECT_GE(b, rows);
    EXPECT_LE(b, 256);
    if (rows > 32)
      EXPECT_LE(4 * (b - rows), b) << rows;  // at most a quarter of the rows stale
    else
      EXPECT_LE(b - rows, 7) << rows;
    EXPECT_LE(decode_bucket(rows - 1 > 0 ? rows - 1 : 1, 256), b);  // monotone
    shapes.insert(b);
  }
  EXPECT_LE(shapes.size(), 24u);  // a shrinking batch of 256 meets few shapes (one graph each)
}

// The fixed steps attend over more slots (a key mask hides the unfilled ones) and compute a bucket
// of rows, so their sums differ from the dynamic steps' in the last bits only: the same tokens,
// log-probs within 1e-5 (FP32).
TEST(FixedDecode, FixedStepsSampleTheDynamicTokens) {
  const model::LlamaModel m = make_model();
  const auto ps = grouped_prompts(10, 4);  // 40 rows: buckets 40, 32, 28, 24, 20, 16, 8 as rows stop
  const int64_t N = 150;                   // the prompts' 2-8 slots + 150 cross the 128-slot bucket
  GenerateOptions o;
  o.sampling.max_new_tokens = N;
  o.stop_ids = {7};
  for (double temperature : {1.0, 0.0}) {
    o.sampling.temperature = temperature;
    o.uniforms = temperature > 0 ? sampling_uniforms(9, 3, iota(40), N, torch::kCPU) : torch::Tensor();
    o.sampling.decode = DecodeMode::dynamic;
    const auto dynamic = generate(m, ps, o, gen(0));
    o.sampling.decode = DecodeMode::fixed;
    const auto fixed = generate(m, ps, o, gen(0));
    expect_same(dynamic, fixed, 1e-5, "temperature " + std::to_string(temperature));
    if (temperature > 0) {  // the fixture exercises what it claims: rows stop at many steps, some run long
      std::set<std::size_t> lengths;
      int64_t stopped = 0, long_rows = 0;
      for (const auto& c : dynamic) {
        lengths.insert(c.tokens.size());
        stopped += c.finish == FinishReason::eos;
        long_rows += c.tokens.size() > 130;
      }
      EXPECT_GE(stopped, 24);
      EXPECT_GE(lengths.size(), 10u);
      EXPECT_GE(long_rows, 1);
    }
  }
  o.sampling.temperature = 1.0;
  o.uniforms = sampling_uniforms(9, 3, iota(40), N, torch::kCPU);
  o.sampling.decode = DecodeMode::dynamic;
  const auto dynamic = generate(m, ps, o, gen(0));
  o.sampling.decode = DecodeMode::automatic;  // the CPU's automatic choice is the dynamic steps
  expect_same(dynamic, generate(m, ps, o, gen(0)), 0, "auto on the CPU");
  o.sampling.decode = DecodeMode::graphs;
  EXPECT_NE(testing::error_of([&] { generate(m, ps, o, gen(0)); }).find("rollout.decode: graphs needs a CUDA device"),
            std::string::npos);
}

// BF16 on the CPU: fixed and dynamic steps run different attention kernels (SDPA with a mask vs
// our fused decode kernel), so their log-probs agree within BF16's resolution, not bit for bit.
TEST(FixedDecode, FixedStepsRunInBf16) {
  const model::LlamaModel m = make_model(torch::kCPU, torch::kBFloat16);
  const auto ps = grouped_prompts(4, 2);
  GenerateOptions o;
  o.sampling.max_new_tokens = 20;
  o.sampling.temperature = 0;
  o.sampling.decode = DecodeMode::fixed;
  const auto fixed = generate(m, ps, o, gen(0));
  for (const auto& c : fixed) {
    EXPECT_EQ(c.tokens.size(), 20u);
    for (float lp : c.logprobs) EXPECT_TRUE(std::isfinite(lp) && lp <= 0);
  }
}

// On a CUDA device (skipped without one): replaying the captured graphs gives the fixed steps' bits
// exactly (the same kernels), in FP32 and BF16, through row buckets and slot buckets; and the graphs
// sample the CPU's tokens in FP32.
TEST(FixedDecode, CudaGraphsGiveTheFixedStepsBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto ps = grouped_prompts(10, 4);
  const int64_t N = 150;
  GenerateOptions o;
  o.sampling.max_new_tokens = N;
  o.stop_ids = {7};
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const model::LlamaModel m = make_model(torch::kCUDA, dtype);
    o.uniforms = sampling_uniforms(9, 3, iota(40), N, torch::kCUDA);
    o.sampling.decode = DecodeMode::fixed;
    const auto fixed = generate(m, ps, o, gen(0));
    o.sampling.decode = DecodeMode::graphs;
    const auto graphs = generate(m, ps, o, gen(0));
    expect_same(fixed, graphs, 0, dtype == torch::kFloat32 ? "fp32" : "bf16");
    o.sampling.decode = DecodeMode::automatic;  // a CUDA device's automatic choice is the graphs
    expect_same(graphs, generate(m, ps, o, gen(0)), 0, "auto");
    if (dtype == torch::kFloat32) {
      o.uniforms = o.uniforms.cpu();
      o.sampling.decode = DecodeMode::dynamic;
      expect_same(generate(make_model(), ps, o, gen(0)), graphs, 1e-4, "cpu vs cuda graphs");
    }
  }
}

}  // namespace
}  // namespace unstuck::rollout
