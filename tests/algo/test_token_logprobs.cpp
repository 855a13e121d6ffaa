// Chunked token log-probs against the unchunked log_softmax + gather: equal values and gradients
// (bit for bit) for every chunk size, on a non-contiguous view as the trainer passes it; and the
// chunked entropy / exact KL / reference log-probs against their one-shot formulas.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "unstuck/algo/token_logprobs.h"

namespace unstuck::algo {
namespace {

// (n, L, V) logits of which the trainer takes the last T positions: a view, as in the trainer.
struct Case {
  torch::Tensor full, targets;
  static constexpr int64_t n = 3, L = 9, T = 7, V = 11;
  Case() {
    torch::manual_seed(7);
    full = torch::randn({n, L, V}) * 3;
    targets = torch::randint(V, {n, T}, torch::kLong);
  }
  torch::Tensor logits(const torch::Tensor& f) const { return f.narrow(1, L - T, T); }
};

TEST(TokenLogProbs, WorkedExample) {
  const torch::Tensor logits = torch::tensor({0.0f, std::log(3.0f)}).view({1, 1, 2});
  const torch::Tensor lp = token_log_probs(logits, torch::tensor({1L}).view({1, 1}), 1);
  EXPECT_NEAR(lp.item<float>(), std::log(0.75f), 1e-6);
}

TEST(TokenLogProbs, ValuesAndGradientsEqualTheUnchunkedOnesForEveryChunkSize) {
  const Case c;
  const torch::Tensor weight = torch::randn({c.n, c.T});  // a loss sum(w * logp) with uneven weights
  torch::Tensor f0 = c.full.clone().requires_grad_(true);
  const torch::Tensor want = torch::log_softmax(c.logits(f0), -1).gather(2, c.targets.unsqueeze(2)).squeeze(2);
  (want * weight).sum().backward();
  for (int64_t chunk : {0, 1, 2, 3, 7, 100}) {
    torch::Tensor f = c.full.clone().requires_grad_(true);
    const torch::Tensor got = token_log_probs(c.logits(f), c.targets, chunk);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(torch::equal(got, want.detach())) << "chunk " << chunk;
    (got * weight).sum().backward();
    EXPECT_TRUE(torch::equal(f.grad(), f0.grad())) << "chunk " << chunk;
    // The prompt positions get no gradient.
    EXPECT_EQ(f.grad().narrow(1, 0, c.L - c.T).abs().sum().item<float>(), 0.0f);
  }
}

TEST(TokenLogProbs, StatsEqualTheOneShotFormulas) {
  const Case c;
  torch::manual_seed(8);
  const torch::Tensor ref_full = torch::randn({c.n, c.L, c.V}) * 2;
  const torch::Tensor lp = torch::log_softmax(c.logits(c.full), -1), ref = torch::log_softmax(c.logits(ref_full), -1);
  const torch::Tensor ent = -(lp.exp() * lp).sum(-1), kl = (lp.exp() * (lp - ref)).sum(-1);
  const torch::Tensor lp_tok = lp.gather(2, c.targets.unsqueeze(2)).squeeze(2);
  const torch::Tensor ref_tok = ref.gather(2, c.targets.unsqueeze(2)).squeeze(2);
  for (int64_t chunk : {0, 1, 4, 7}) {
    const TokenStats s = token_stats(c.logits(c.full), c.logits(ref_full), c.targets, chunk);
    EXPECT_TRUE(torch::equal(s.logp, lp_tok)) << chunk;
    EXPECT_TRUE(torch::equal(s.entropy, ent)) << chunk;
    EXPECT_TRUE(torch::equal(s.kl_exact, kl)) << chunk;
    EXPECT_TRUE(torch::equal(s.ref_logp, ref_tok)) << chunk;
    const TokenStats no_ref = token_stats(c.logits(c.full), {}, c.targets, chunk);
    EXPECT_FALSE(no_ref.kl_exact.defined());
    EXPECT_FALSE(no_ref.ref_logp.defined());
    EXPECT_TRUE(torch::equal(no_ref.entropy, ent));
  }
  // KL of a distribution to itself is 0 and entropy is at most log V.
  const TokenStats self = token_stats(c.logits(c.full), c.logits(c.full), c.targets, 2);
  EXPECT_EQ(self.kl_exact.abs().max().item<float>(), 0.0f);
  EXPECT_LE(self.entropy.max().item<float>(), std::log(float(c.V)) + 1e-5f);
}

}  // namespace
}  // namespace unstuck::algo

namespace unstuck::algo {
namespace {

// The fused LM head against the unfused computation it replaces (logits = hidden W^T in hidden's
// dtype, then FP32 log_softmax): log-probs, entropy, exact KL and reference log-probs, and the
// gradients of a loss over log-probs and entropy w.r.t. the hidden states and the weight, with
// the weight's gradient through autograd or added into an FP32 sink. Every chunk size.
struct HeadCase {
  static constexpr int64_t n = 3, T = 9, D = 8, V = 37;
  torch::Tensor hidden, weight, ref_hidden, ref_weight, targets, wl, we;
  HeadCase() {
    torch::manual_seed(11);
    hidden = torch::randn({n, T, D});
    weight = torch::randn({V, D}) * 0.5;
    ref_hidden = hidden + 0.1 * torch::randn({n, T, D});
    ref_weight = weight + 0.1 * torch::randn({V, D});
    targets = torch::randint(V, {n, T}, torch::kLong);
    wl = torch::randn({n, T});
    we = torch::randn({n, T});
  }
};

TEST(HeadLogProbs, WorkedExample) {
  const HeadInput in{torch::tensor({1.0f, 0.0f}).view({1, 1, 2}),
                     torch::tensor({0.0f, 0.0f, std::log(3.0f), 0.0f}).view({2, 2})};
  const HeadLogProbs h = head_log_probs(in, {}, torch::tensor({1L}).view({1, 1}), 1);
  EXPECT_NEAR(h.logp.item<float>(), std::log(0.75f), 1e-6);
}

TEST(HeadLogProbs, EqualsTheUnfusedHeadInValuesAndGradients) {
  const HeadCase c;
  torch::Tensor h0 = c.hidden.clone().requires_grad_(true), w0 = c.weight.clone().requires_grad_(true);
  const torch::Tensor lsm = torch::log_softmax(at::matmul(h0, w0.t()).to(torch::kFloat32), -1);
  const torch::Tensor want_logp = lsm.gather(2, c.targets.unsqueeze(2)).squeeze(2);
  const torch::Tensor want_ent = -(lsm.exp() * lsm).sum(-1);
  (want_logp * c.wl + want_ent * c.we).sum().backward();
  const torch::Tensor ref_lsm = torch::log_softmax(at::matmul(c.ref_hidden, c.ref_weight.t()), -1);
  const torch::Tensor want_kl = (lsm.exp() * (lsm - ref_lsm)).sum(-1).detach();
  const torch::Tensor want_ref = ref_lsm.gather(2, c.targets.unsqueeze(2)).squeeze(2);
  for (int64_t chunk : {0, 1, 2, 4, 9, 100}) {
    for (bool sink : {false, true}) {
      torch::Tensor h = c.hidden.clone().requires_grad_(true), w = c.weight.clone().requires_grad_(true);
      const torch::Tensor weight_sink = sink ? torch::zeros({c.V, c.D}) : torch::Tensor();
      const HeadLogProbs got = head_log_probs({h, w}, {c.ref_hidden, c.ref_weight}, c.targets, chunk, weight_sink);
      EXPECT_TRUE(torch::allclose(got.logp, want_logp.detach(), 1e-5, 1e-5)) << chunk;
      EXPECT_TRUE(torch::allclose(got.entropy, want_ent.detach(), 1e-5, 1e-5)) << chunk;
      EXPECT_TRUE(torch::allclose(got.stats.logp, want_logp.detach(), 1e-5, 1e-5)) << chunk;
      EXPECT_TRUE(torch::allclose(got.stats.kl_exact, want_kl, 1e-5, 1e-5)) << chunk;
      EXPECT_TRUE(torch::allclose(got.stats.ref_logp, want_ref, 1e-5, 1e-5)) << chunk;
      (got.logp * c.wl + got.entropy * c.we).sum().backward();
      EXPECT_TRUE(torch::allclose(h.grad(), h0.grad(), 1e-5, 1e-5)) << chunk << " sink " << sink;
      const torch::Tensor wgrad = sink ? weight_sink : w.grad();
      EXPECT_TRUE(torch::allclose(wgrad, w0.grad(), 1e-5, 1e-5)) << chunk << " sink " << sink;
      if (sink) EXPECT_FALSE(w.grad().defined() && w.grad().abs().sum().item<float>() > 0) << chunk;
    }
  }
}

// In BF16 the product is taken in BF16 and widened, as LlamaModel::logits_of does; no graph
// without gradients.
TEST(HeadLogProbs, Bf16ProductAndNoGraph) {
  const HeadCase c;
  const torch::Tensor h = c.hidden.to(torch::kBFloat16), w = c.weight.to(torch::kBFloat16);
  const torch::Tensor lsm = torch::log_softmax(at::matmul(h, w.t()).to(torch::kFloat32), -1);
  const HeadLogProbs got = head_log_probs({h, w}, {}, c.targets, 4);
  EXPECT_TRUE(torch::allclose(got.logp, lsm.gather(2, c.targets.unsqueeze(2)).squeeze(2), 1e-4, 1e-4));
  EXPECT_FALSE(got.logp.requires_grad());
  EXPECT_FALSE(got.stats.kl_exact.defined());
}

}  // namespace
}  // namespace unstuck::algo
