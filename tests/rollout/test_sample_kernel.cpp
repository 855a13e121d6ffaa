// The fused sampler's CPU kernel (src/rollout/sample_kernel.h) against its double reference and
// against libtorch's ops (today's device path): the same tokens except where a uniform falls within
// a relative 1e-5 of a CDF boundary (checked in exact arithmetic for every differing draw), log-probs
// within the header's bound; top-k ties, top-p's boundary, greedy ties and rows with NaN or -inf by
// hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "rollout/sample_kernel.h"
#include "unstuck/rollout/sampler.h"

namespace unstuck::rollout {
namespace {

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// (rows, V) logits shaped like a language model's: a wide normal body, some rows peaked on a few
// tokens (distinct values: top-p breaks ties by index, libtorch's sort its own way), a few -inf
// (masked) entries.
torch::Tensor lm_logits(int64_t rows, int64_t V, uint64_t seed) {
  torch::Tensor x = torch::randn({rows, V}, gen(seed)) * 2.5;
  for (int64_t r = 0; r < rows; r += 3)
    x[r].index_put_({torch::randperm(V, gen(seed + r)).narrow(0, 0, 4)}, torch::tensor({18.0f, 17.3f, 16.1f, 15.2f}));
  x.select(1, 7).fill_(-INFINITY);
  return x.contiguous();
}

struct Draws {
  std::vector<int64_t> tokens;
  std::vector<float> logprobs;
};

Draws run_kernel(const torch::Tensor& x, const torch::Tensor& u, const SampleRowsShape& shape, bool reference) {
  const int64_t rows = x.size(0);
  Draws d{std::vector<int64_t>(std::size_t(rows)), std::vector<float>(std::size_t(rows))};
  const float* uniforms = u.defined() ? u.data_ptr<float>() : nullptr;
  if (reference)
    sample_rows_reference(x.data_ptr<float>(), uniforms, shape, d.tokens.data(), d.logprobs.data(), rows);
  else
    sample_rows_f32(x.data_ptr<float>(), uniforms, shape, d.tokens.data(), d.logprobs.data(), 0, rows);
  return d;
}

// |(exact cumulative weight through token min(a, b)) - u * (exact kept total)| / kept total: how near
// the uniform lies to the boundary between two different draws, in exact (long double) arithmetic
// over the reference's kept set.
double boundary_distance(const float* x, float u, const SampleRowsShape& p, const std::vector<uint8_t>& kept, int64_t a,
                         int64_t b) {
  std::vector<float> s(std::size_t(p.vocab));
  float M = -INFINITY;
  for (int64_t i = 0; i < p.vocab; ++i)
    M = std::max(M, s[std::size_t(i)] = x[i] / (p.temperature == 0 ? 1 : p.temperature));
  long double total = 0, through = 0;
  for (int64_t i = 0; i < p.vocab; ++i) {
    if (!kept[std::size_t(i)]) continue;
    const long double w = std::exp((long double)s[std::size_t(i)] - M);
    total += w;
    if (i <= std::min(a, b)) through += w;
  }
  return double(std::fabs(through - (long double)u * total) / total);
}

// The reference's kept set of a row: the tokens it can draw (every uniform on a fine grid).
std::vector<uint8_t> kept_set(const float* x, const SampleRowsShape& p) {
  std::vector<uint8_t> kept(std::size_t(p.vocab), 0);
  constexpr int kGrid = 4096;
  std::vector<float> u(kGrid);
  for (int i = 0; i < kGrid; ++i) u[std::size_t(i)] = float(i) / kGrid;
  std::vector<float> rows(std::size_t(kGrid * p.vocab));
  for (int i = 0; i < kGrid; ++i) std::copy(x, x + p.vocab, rows.begin() + i * p.vocab);
  SampleRowsShape q = p;
  q.row_stride = p.vocab;
  std::vector<int64_t> tokens(kGrid);
  std::vector<float> lp(kGrid);
  sample_rows_reference(rows.data(), u.data(), q, tokens.data(), lp.data(), kGrid);
  for (const int64_t t : tokens) kept[std::size_t(t)] = 1;
  return kept;
}

// Every draw equal to `want`'s, or within a relative 1e-5 of the boundary between the two tokens;
// such draws are at most 1% of them. The log-probs of equal draws within logprob_tolerance + 2 ulp.
void expect_same_draws(const torch::Tensor& x, const torch::Tensor& u, const SampleRowsShape& p, const Draws& got,
                       const Draws& want, double logprob_tolerance) {
  int64_t differing = 0;
  for (std::size_t r = 0; r < got.tokens.size(); ++r) {
    const float w = want.logprobs[r];
    if (got.tokens[r] == want.tokens[r]) {
      EXPECT_NEAR(got.logprobs[r], w, logprob_tolerance + 2 * std::fabs(std::nextafter(w, 0.0f) - w)) << "row " << r;
      continue;
    }
    ++differing;
    const float* row = x.data_ptr<float>() + int64_t(r) * x.size(1);
    const std::vector<uint8_t> kept =
        p.top_k > 0 || p.top_p < 1 ? kept_set(row, p) : std::vector<uint8_t>(std::size_t(p.vocab), 1);
    EXPECT_LE(boundary_distance(row, u[int64_t(r)].item<float>(), p, kept, got.tokens[r], want.tokens[r]), 1e-5)
        << "row " << r << ": " << got.tokens[r] << " against " << want.tokens[r];
  }
  EXPECT_LE(differing * 100, int64_t(got.tokens.size())) << differing << " of " << got.tokens.size() << " draws differ";
}

struct Case {
  int64_t vocab;
  float temperature;
  int64_t top_k;
  double top_p;
};

TEST(SampleKernel, MatchesTheDoubleReference) {
  // Qwen2's vocabulary (chunks of 2048 and a partial one), a vocabulary under one chunk, and the
  // filters; 48 rows each.
  const std::vector<Case> cases = {{151936, 1.0f, 0, 1.0}, {151936, 0.7f, 0, 1.0}, {5003, 1.3f, 0, 1.0},
                                   {151936, 0.0f, 0, 1.0}, {6149, 1.0f, 50, 1.0},  {6149, 1.0f, 0, 0.9},
                                   {6149, 0.8f, 20, 0.7}};
  for (const Case& c : cases) {
    SCOPED_TRACE("V " + std::to_string(c.vocab) + " T " + std::to_string(c.temperature) + " top_k " +
                 std::to_string(c.top_k) + " top_p " + std::to_string(c.top_p));
    const torch::Tensor x = lm_logits(48, c.vocab, 11), u = torch::rand({48}, gen(12));
    const SampleRowsShape p{c.vocab, c.vocab, c.temperature, c.top_k, c.top_p};
    expect_same_draws(x, u, p, run_kernel(x, u, p, false), run_kernel(x, u, p, true), 4e-6);
  }
}

TEST(SampleKernel, MatchesLibtorchsOps) {
  // The sampler's CPU path (sample_logits) against the ops it replaces, on strided rows
  // (a decode step's logits are a view), in every sampling configuration.
  const std::vector<Case> cases = {{151936, 1.0f, 0, 1.0}, {151936, 0.6f, 0, 1.0}, {151936, 0.0f, 0, 1.0},
                                   {6149, 1.0f, 40, 1.0},  {6149, 1.0f, 0, 0.8},   {6149, 0.9f, 30, 0.6}};
  for (const Case& c : cases) {
    SCOPED_TRACE("V " + std::to_string(c.vocab) + " T " + std::to_string(c.temperature));
    const torch::Tensor wide = lm_logits(40, c.vocab + 64, 21);
    const torch::Tensor x = wide.narrow(1, 0, c.vocab), u = torch::rand({40}, gen(22));
    SamplingConfig s;
    s.temperature = c.temperature;
    s.top_k = c.top_k;
    s.top_p = c.top_p;
    const auto [kt, kl] = sample_logits(x, s, u);
    const auto [ot, ol] = sample_logits(x, s, u, SamplerPath::ops);
    const Draws got{std::vector<int64_t>(kt.data_ptr<int64_t>(), kt.data_ptr<int64_t>() + 40),
                    std::vector<float>(kl.data_ptr<float>(), kl.data_ptr<float>() + 40)};
    const Draws want{std::vector<int64_t>(ot.data_ptr<int64_t>(), ot.data_ptr<int64_t>() + 40),
                     std::vector<float>(ol.data_ptr<float>(), ol.data_ptr<float>() + 40)};
    const SampleRowsShape p{c.vocab, c.vocab, c.temperature, c.top_k, c.top_p};
    // libtorch's float logsumexp adds its own rounding: 1e-5 against the ops.
    expect_same_draws(x.contiguous(), u, p, got, want, 1e-5);
  }
}

Draws draw_one(const std::vector<float>& logits, float u, SampleRowsShape p) {
  p.vocab = p.row_stride = int64_t(logits.size());
  const torch::Tensor x = torch::tensor(logits).unsqueeze(0), uniform = torch::tensor({u});
  return run_kernel(x, uniform, p, false);
}

TEST(SampleKernel, TopKKeepsTiesAndTopPStopsAtItsMass) {
  // top_k 3 of [3, 1, 2, 2, 0]: the k-th largest is 2, so both 2s stay with the 3.
  std::vector<int> seen(5, 0);
  for (int i = 0; i < 1000; ++i)
    seen[std::size_t(draw_one({3, 1, 2, 2, 0}, float(i) / 1000, {0, 0, 1.0f, 3, 1.0}).tokens[0])]++;
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[2], 0);
  EXPECT_GT(seen[3], 0);
  EXPECT_EQ(seen[1] + seen[4], 0);
  // Probabilities 0.3, 0.05, 0.5, 0.15: top_p 0.79 keeps 0.5 and 0.3 (the mass before 0.15 is 0.8),
  // so u < 0.375 (0.3 of the kept 0.8) draws token 0 and u >= 0.375 token 2.
  const std::vector<float> x = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};
  const SampleRowsShape top_p{0, 0, 1.0f, 0, 0.79};
  EXPECT_EQ(draw_one(x, 0.0f, top_p).tokens[0], 0);  // u = 0: the first kept token in vocabulary order
  EXPECT_EQ(draw_one(x, 0.37f, top_p).tokens[0], 0);
  EXPECT_EQ(draw_one(x, 0.38f, top_p).tokens[0], 2);
  EXPECT_EQ(draw_one(x, 0.999f, top_p).tokens[0], 2);
  // 0.81 also keeps 0.15: u = 0.999 lands on it.
  EXPECT_EQ(draw_one(x, 0.999f, {0, 0, 1.0f, 0, 0.81}).tokens[0], 3);
  // The log-prob is before filtering: log 0.5 whatever the filter.
  EXPECT_NEAR(draw_one(x, 0.9f, top_p).logprobs[0], std::log(0.5), 1e-6);
}

TEST(SampleKernel, GreedyTakesTheFirstMaximum) {
  const Draws d = draw_one({1, 5, 5, 2}, 0.0f, {0, 0, 0.0f, 0, 1.0});
  EXPECT_EQ(d.tokens[0], 1);
  EXPECT_NEAR(d.logprobs[0], 5 - std::log(std::exp(1.0) + 2 * std::exp(5.0) + std::exp(2.0)), 1e-6);
}

TEST(SampleKernel, MaskedTokensAreNeverDrawnAndBadRowsSayNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const SampleRowsShape p{0, 0, 1.0f, 0, 1.0};
  EXPECT_EQ(draw_one({-inf, 0, 1, -inf}, 0.0f, p).tokens[0], 1);
  EXPECT_EQ(draw_one({-inf, 0, 1, -inf}, 0.99999994f, p).tokens[0], 2);
  EXPECT_EQ(draw_one({-200, 0, -200}, 0.99999994f, p).tokens[0], 1);  // e^-200: never drawn
  const Draws nan = draw_one({0, std::nanf(""), 3}, 0.5f, p);
  EXPECT_EQ(nan.tokens[0], 1);
  EXPECT_TRUE(std::isnan(nan.logprobs[0]));
  const Draws masked = draw_one({-inf, -inf}, 0.5f, p);
  EXPECT_EQ(masked.tokens[0], 0);
  EXPECT_TRUE(std::isnan(masked.logprobs[0]));
  EXPECT_TRUE(std::isnan(draw_one({0, inf}, 0.5f, p).logprobs[0]));
  // A NaN among a chunk of -inf is still seen.
  std::vector<float> x(5000, -inf);
  x[10] = 0;
  x[4000] = std::nanf("");
  EXPECT_TRUE(std::isnan(draw_one(x, 0.5f, p).logprobs[0]));
}

TEST(SampleKernel, ARowDrawsAloneWhatItDrawsInABatch) {
  const torch::Tensor x = lm_logits(9, 151936, 31), u = torch::rand({9}, gen(32));
  const SampleRowsShape p{151936, 151936, 1.0f, 0, 1.0};
  const Draws all = run_kernel(x, u, p, false);
  for (int64_t r = 0; r < 9; ++r) {
    std::vector<int64_t> tokens(9, -1);
    std::vector<float> logprobs(9, 0.0f);
    sample_rows_f32(x.data_ptr<float>(), u.data_ptr<float>(), p, tokens.data(), logprobs.data(), r, r + 1);
    EXPECT_EQ(tokens[std::size_t(r)], all.tokens[std::size_t(r)]);
    EXPECT_EQ(0, std::memcmp(&logprobs[std::size_t(r)], &all.logprobs[std::size_t(r)], sizeof(float))) << r;
  }
}

// The CUDA twin (sample_cuda.cu) draws the CPU kernel's tokens and log-probs bit for bit: Qwen2's
// vocabulary and one under a chunk, temperatures 1 and 0.7, greedy, and rows of NaN, +inf and -inf.
TEST(SampleKernel, CudaDrawsTheCpuKernelsBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : std::vector<Case>{
           {151936, 1.0f, 0, 1.0}, {151936, 0.7f, 0, 1.0}, {151936, 0.0f, 0, 1.0}, {1000, 1.0f, 0, 1.0}}) {
    SCOPED_TRACE("V " + std::to_string(c.vocab) + " T " + std::to_string(c.temperature));
    torch::Tensor x = lm_logits(64, c.vocab, 41);
    x[1][5] = std::nanf("");
    x[2][9] = INFINITY;
    x[3].fill_(-INFINITY);
    const torch::Tensor u = torch::rand({64}, gen(42));
    u[4] = 0.0f;
    const SampleRowsShape p{c.vocab, c.vocab, c.temperature, 0, 1.0};
    const Draws cpu = run_kernel(x, u, p, false);
    SamplingConfig s;
    s.temperature = c.temperature;
    const auto [tokens, logprobs] = sample_logits(x.cuda(), s, u.cuda(), SamplerPath::kernel);
    const torch::Tensor t = tokens.cpu(), l = logprobs.cpu();
    for (int64_t r = 0; r < 64; ++r) {
      EXPECT_EQ(t[r].item<int64_t>(), cpu.tokens[std::size_t(r)]) << "row " << r;
      const float got = l[r].item<float>();
      EXPECT_EQ(0, std::memcmp(&got, &cpu.logprobs[std::size_t(r)], sizeof got))
          << "row " << r << ": " << got << " against " << cpu.logprobs[std::size_t(r)];
    }
  }
}

TEST(SampleKernel, TheForcedKernelTakesFp32RowsOnly) {
  SamplingConfig s;
  const torch::Tensor u = torch::rand({2});
  EXPECT_THROW(sample_logits(torch::zeros({2, 10}, torch::kBFloat16), s, u, SamplerPath::kernel),
               std::invalid_argument);
  EXPECT_THROW(sample_logits(torch::zeros({10, 2}).t(), s, u, SamplerPath::kernel), std::invalid_argument);
  EXPECT_EQ(
      std::get<0>(sample_logits(torch::tensor({{0.0f, 9.0f, 0.0f}}), s, torch::tensor({0.5f}), SamplerPath::kernel))
          .item<int64_t>(),
      1);
}

}  // namespace
}  // namespace unstuck::rollout
