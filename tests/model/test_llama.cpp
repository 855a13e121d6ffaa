// Llama model: the KV-cached path equals the full forward (FP32: 1e-5 relative; BF16: stated
// tolerance), padding (one run per row: rotated, causal; holes: dense mask) equals the unpadded
// sequence, a sliding window agrees between paths, dropped cache rows decode as before, activation
// checkpointing gives the plain gradients, parameters view the flat buffer, gradients reach every
// parameter, bad buffers are rejected, the no-gradient kernels agree with the training ops, and CUDA
// (when present) matches the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "unstuck/common/error.h"
#include "unstuck/model/llama.h"
#include "common/model_shape.h"

namespace unstuck::model {
namespace {

ModelConfig small_config() {
  return testing::model_shape(50, 64, 2, 4, 2, 96, 64);  // 2 KV heads for 4: grouped-query attention on
}

torch::Tensor fresh_weights(const ModelConfig& c, torch::ScalarType dtype, uint64_t seed = 1) {
  const ParamLayout layout = llama_layout(c);
  torch::Tensor flat = torch::empty({layout.total}, torch::kFloat32);
  init_llama_weights(layout, c, flat, seed);
  return flat.to(dtype);
}

torch::Tensor random_tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, vocab, {B, T}, torch::kLong);
}

// Max |a - b| / max |b|.
double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

void check_cache_matches_full(torch::ScalarType dtype, double tol) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, dtype));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = random_tokens(3, 24, c.vocab_size, 7);
  const torch::Tensor full = model.forward(tokens);  // (3, 24, V)
  KVCache cache = model.new_cache(3, 32);
  std::vector<torch::Tensor> parts{model.forward_cached(tokens.narrow(1, 0, 10), cache)};
  for (int64_t t = 10; t < 24; ++t) parts.push_back(model.forward_cached(tokens.narrow(1, t, 1), cache));
  const torch::Tensor cached = torch::cat(parts, 1);
  EXPECT_LT(rel_error(cached, full), tol) << c10::toString(dtype);
  EXPECT_EQ(cache.length, 24);
}

TEST(Llama, CachedDecodingMatchesFullForwardFp32) { check_cache_matches_full(torch::kFloat32, 1e-5); }

// BF16 compute: the two paths reduce in different orders, so logits differ by BF16 rounding of
// activations; 2% of the largest logit bounds it with margin.
TEST(Llama, CachedDecodingMatchesFullForwardBf16) { check_cache_matches_full(torch::kBFloat16, 2e-2); }

// FP16 CPU decoding attends over the whole buffer, so the cache's buffers grow with the filled slots
// (kGrowSlots at a time, capped at the capacity) and decoding reads about the filled slots only; FP32
// and BF16 on the CPU decode with a kernel that reads only the filled slots, so their cache is
// allocated once at full capacity (no step copies it). The logits are those of a full forward across
// every growth (FP32 1e-5, BF16 and FP16 2e-2, as above), and a token past the capacity is refused.
void check_cache_growth(torch::ScalarType dtype, double tol, const std::vector<int64_t>& expected_sizes) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, dtype));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = random_tokens(2, 37, c.vocab_size, 9);
  const torch::Tensor full = model.forward(tokens);
  KVCache cache = model.new_cache(2, 37);
  EXPECT_EQ(cache.allocated(), 0);
  std::vector<torch::Tensor> parts{model.forward_cached(tokens.narrow(1, 0, 5), cache)};
  std::vector<int64_t> sizes{cache.allocated()};
  for (int64_t t = 5; t < 37; ++t) {
    parts.push_back(model.forward_cached(tokens.narrow(1, t, 1), cache));
    if (sizes.back() != cache.allocated()) sizes.push_back(cache.allocated());
  }
  EXPECT_EQ(sizes, expected_sizes) << c10::toString(dtype);
  EXPECT_LT(rel_error(torch::cat(parts, 1), full), tol) << c10::toString(dtype);
  EXPECT_THROW(model.forward_cached(tokens.narrow(1, 0, 1), cache), UserError);
}

TEST(Llama, CacheGrowsWithItsFill) {
  check_cache_growth(torch::kFloat16, 2e-2, {KVCache::kGrowSlots, 2 * KVCache::kGrowSlots, 37});
  check_cache_growth(torch::kBFloat16, 2e-2, {37});
  check_cache_growth(torch::kFloat32, 1e-5, {37});
}

TEST(Llama, LeftPaddingWithMaskEqualsUnpadded) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, torch::kFloat32));
  torch::NoGradGuard no_grad;
  const torch::Tensor real = random_tokens(1, 12, c.vocab_size, 3);
  const torch::Tensor alone = model.forward(real);
  const int64_t pad = 5;
  const torch::Tensor padded = torch::cat({torch::zeros({1, pad}, torch::kLong), real}, 1);
  const torch::Tensor valid = torch::cat({torch::zeros({1, pad}, torch::kBool), torch::ones({1, 12}, torch::kBool)}, 1);
  const torch::Tensor out = model.forward(padded, valid).narrow(1, pad, 12);
  EXPECT_LT(rel_error(out, alone), 1e-5);
  // The cached path with the same left padding: prefill, then one more token.
  KVCache cache = model.new_cache(1, 32);
  const torch::Tensor pre = model.forward_cached(padded, cache, valid).narrow(1, pad, 12);
  EXPECT_LT(rel_error(pre, alone), 1e-5);
  const torch::Tensor next = torch::full({1, 1}, 4, torch::kLong);
  const torch::Tensor step = model.forward_cached(next, cache);
  const torch::Tensor ref = model.forward(torch::cat({real, next}, 1)).narrow(1, 12, 1);
  EXPECT_LT(rel_error(step, ref), 1e-5);
}

TEST(Llama, ParametersViewTheFlatBuffer) {
  const ModelConfig c = small_config();
  torch::Tensor flat = fresh_weights(c, torch::kFloat32);
  LlamaModel model(c, flat);
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = random_tokens(2, 8, c.vocab_size, 5);
  const torch::Tensor before = model.forward(tokens);
  const ParamEntry* head = model.layout().find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  flat.narrow(0, head->offset, head->numel).mul_(2.0);  // rewriting the buffer changes the model
  EXPECT_TRUE(torch::allclose(model.forward(tokens), before * 2.0, 1e-5, 1e-5));
  EXPECT_EQ(model.parameters().size(), model.layout().entries.size());
}

// The no-gradient forward (rollouts, measurements) runs our CPU kernels (RMSNorm, RoPE, decode
// attention); the training forward runs libtorch's ops. They agree to FP32 rounding
// (1e-5 of the largest logit) and to BF16 rounding (2%, as the cached path above).
void check_kernels_match_training_ops(torch::ScalarType dtype, double tol) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, dtype));
  const torch::Tensor tokens = random_tokens(3, 16, c.vocab_size, 8);
  torch::Tensor measured;
  {
    torch::NoGradGuard no_grad;
    measured = model.forward(tokens);
  }
  model.set_requires_grad(true);
  const torch::Tensor trained = model.forward(tokens).detach();
  EXPECT_LT(rel_error(measured.to(torch::kFloat32), trained.to(torch::kFloat32)), tol) << c10::toString(dtype);
  EXPECT_FALSE(torch::equal(measured, torch::zeros_like(measured)));
}

TEST(Llama, NoGradientKernelsMatchTheTrainingOpsFp32) { check_kernels_match_training_ops(torch::kFloat32, 1e-5); }
TEST(Llama, NoGradientKernelsMatchTheTrainingOpsBf16) { check_kernels_match_training_ops(torch::kBFloat16, 2e-2); }

TEST(Llama, GradientsReachEveryParameter) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, torch::kFloat32));
  model.set_requires_grad(true);
  const torch::Tensor tokens = random_tokens(2, 10, c.vocab_size, 9);
  const torch::Tensor logits = model.forward(tokens);
  torch::nn::functional::cross_entropy(logits.view({-1, c.vocab_size}), tokens.view({-1})).backward();
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const torch::Tensor& g = model.parameters()[i].grad();
    ASSERT_TRUE(g.defined()) << model.layout().entries[i].name;
    EXPECT_GT(g.abs().sum().item<double>(), 0.0) << model.layout().entries[i].name;
  }
}

TEST(Llama, RejectsBadBuffersAndOptions) {
  const ModelConfig c = small_config();
  EXPECT_THROW(LlamaModel(c, torch::zeros({10})), UserError);
  ModelConfig bad = c;
  bad.n_kv_heads = 3;
  EXPECT_THROW(llama_layout(bad), UserError);
  try {
    llama_layout(bad);
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_heads"), std::string::npos);
  }
  LlamaModel model(c, fresh_weights(c, torch::kFloat32));
  EXPECT_THROW(model.forward(random_tokens(1, 65, c.vocab_size, 1)), UserError);
  KVCache cache = model.new_cache(1, 4);
  EXPECT_THROW(model.forward_cached(random_tokens(1, 5, c.vocab_size, 1), cache), UserError);
}

// Rows padded differently (left, right, both, none, and a hole inside: the dense-mask path) give the
// logits of each sequence alone, in the full and the cached forward.
TEST(Llama, AnyPaddingPatternEqualsUnpadded) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, torch::kFloat32));
  torch::NoGradGuard no_grad;
  const torch::Tensor real = random_tokens(4, 12, c.vocab_size, 21);
  const std::vector<std::pair<int64_t, int64_t>> pads = {{3, 0}, {0, 3}, {1, 2}, {0, 0}};  // (left, right)
  const int64_t T = 12;
  torch::Tensor tokens = torch::zeros({4, T}, torch::kLong), valid = torch::zeros({4, T}, torch::kBool);
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t left = pads[std::size_t(b)].first, n = T - left - pads[std::size_t(b)].second;
    tokens[b].narrow(0, left, n).copy_(real[b].narrow(0, 0, n));
    valid[b].narrow(0, left, n).fill_(true);
  }
  const auto check = [&](const torch::Tensor& out, const char* what) {
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t left = pads[std::size_t(b)].first, n = T - left - pads[std::size_t(b)].second;
      const torch::Tensor alone = model.forward(real[b].narrow(0, 0, n).unsqueeze(0))[0];
      EXPECT_LT(rel_error(out[b].narrow(0, left, n), alone), 1e-5) << what << " row " << b;
    }
  };
  check(model.forward(tokens, valid), "full");
  KVCache cache = model.new_cache(4, T);
  check(model.forward_cached(tokens, cache, valid), "cached");
  // A hole inside row 3 (tokens 4..5 padding): the dense-mask path.
  torch::Tensor holed = valid.clone();
  holed[3].narrow(0, 4, 2).fill_(false);
  const torch::Tensor out = model.forward(tokens, holed)[3];
  const torch::Tensor without = torch::cat({real[3].narrow(0, 0, 4), real[3].narrow(0, 6, 6)}).unsqueeze(0);
  const torch::Tensor alone = model.forward(without)[0];
  EXPECT_LT(rel_error(torch::cat({out.narrow(0, 0, 4), out.narrow(0, 6, 6)}), alone), 1e-5);
}

// forward(..., logits_from) returns the logits of the later positions only (what training reads for
// the completion): the same values as the full forward's, for each padding pattern; with gradients,
// the same gradients as the full forward's logits narrowed there.
TEST(Llama, LogitsFromReturnsTheTailOfTheFullForward) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, torch::kFloat32));
  const torch::Tensor tokens = random_tokens(3, 12, c.vocab_size, 5);
  torch::Tensor one_run = torch::ones({3, 12}, torch::kBool), holed = one_run.clone();
  one_run[0].narrow(0, 0, 3).fill_(false);  // left padding: rotated, causal
  holed[1].narrow(0, 4, 2).fill_(false);    // a hole: the dense mask
  for (const torch::Tensor& valid : {torch::Tensor(), one_run, holed}) {
    torch::NoGradGuard no_grad;
    const torch::Tensor full = model.forward(tokens, valid);
    for (int64_t from : {1, 7, 11}) {
      const torch::Tensor tail = model.forward(tokens, valid, from);
      ASSERT_EQ(tail.sizes(), (std::vector<int64_t>{3, 12 - from, c.vocab_size}));
      EXPECT_LT(rel_error(tail, full.narrow(1, from, 12 - from)), 1e-6) << "from " << from;
    }
  }
  const torch::Tensor w = torch::randn({3, 5, c.vocab_size});
  std::vector<torch::Tensor> grads[2];
  for (int k = 0; k < 2; ++k) {
    LlamaModel m(c, fresh_weights(c, torch::kFloat32));
    m.set_requires_grad(true);
    const torch::Tensor out = k == 0 ? m.forward(tokens, one_run).narrow(1, 7, 5) : m.forward(tokens, one_run, 7);
    (out * w).sum().backward();
    for (const torch::Tensor& p : m.parameters()) grads[k].push_back(p.grad().clone());
  }
  for (std::size_t i = 0; i < grads[0].size(); ++i) EXPECT_LT(rel_error(grads[1][i], grads[0][i]), 1e-5) << i;
  EXPECT_THROW(model.forward(tokens, {}, 12), std::invalid_argument);
  EXPECT_THROW(model.forward(tokens, {}, -1), std::invalid_argument);
}

// forward_completions (each distinct prompt computed once, GRPO's groups) gives the logits and the
// gradients of forward() on every row written out in full, for left-padded and unpadded prompts,
// completions of one and several tokens, with activation checkpointing (both passes recomputed per
// layer) and on its fallback (a sliding window shorter than the sequence). FP32: values within
// 1e-5, gradients within 1e-5 relative.
TEST(Llama, SharedPromptsMatchTheFullRows) {
  const ModelConfig base = small_config();
  const torch::Tensor prompts = random_tokens(3, 9, base.vocab_size, 7);
  torch::Tensor left_padded = torch::ones({3, 9}, torch::kBool);
  left_padded[0].narrow(0, 0, 2).fill_(false);
  left_padded[2].narrow(0, 0, 1).fill_(false);
  const torch::Tensor of_row = torch::tensor({0, 0, 0, 1, 1, 2, 2, 2}, torch::kLong);
  const torch::Tensor w = torch::randn({8, 6, base.vocab_size});
  ModelConfig checkpointed = base, windowed = base;
  checkpointed.activation_checkpointing = true;
  windowed.family = Family::mistral;
  windowed.sliding_window = 6;
  for (const ModelConfig& c : {base, checkpointed, windowed})
    for (const torch::Tensor& valid : {torch::Tensor(), left_padded})
      for (int64_t T : {1, 6}) {
        const torch::Tensor completions = random_tokens(8, T, c.vocab_size, 8);
        const SharedPrompts sp{prompts, valid, of_row};
        torch::Tensor out[2];
        std::vector<torch::Tensor> grads[2];
        for (int k = 0; k < 2; ++k) {
          LlamaModel m(c, fresh_weights(c, torch::kFloat32));
          m.set_requires_grad(true);
          if (k == 0) {
            const torch::Tensor rows =
                torch::cat({prompts.index_select(0, of_row), completions.narrow(1, 0, T - 1)}, 1);
            const torch::Tensor rows_valid =
                valid.defined() ? torch::cat({valid.index_select(0, of_row), torch::ones({8, T - 1}, torch::kBool)}, 1)
                                : torch::Tensor();
            out[k] = m.forward(rows, rows_valid, 8);
          } else {
            out[k] = m.forward_completions(sp, completions);
          }
          (out[k] * w.narrow(1, 0, T)).sum().backward();
          for (const torch::Tensor& p : m.parameters()) grads[k].push_back(p.grad().clone());
        }
        const std::string what = std::string(c.sliding_window             ? "window"
                                             : c.activation_checkpointing ? "ckpt"
                                                                          : "plain") +
                                 (valid.defined() ? " padded" : " unpadded") + " T=" + std::to_string(T);
        ASSERT_EQ(out[1].sizes(), (std::vector<int64_t>{8, T, c.vocab_size})) << what;
        EXPECT_LT(rel_error(out[1], out[0]), 1e-5) << what;
        for (std::size_t i = 0; i < grads[0].size(); ++i)
          EXPECT_LT(rel_error(grads[1][i], grads[0][i]), 1e-5) << what << " " << i;
      }
  LlamaModel model(base, fresh_weights(base, torch::kFloat32));
  EXPECT_THROW(model.forward_completions({prompts, {}, of_row.narrow(0, 0, 4)}, random_tokens(8, 3, 50, 1)),
               std::invalid_argument);
  EXPECT_THROW(model.forward_completions({prompts, {}, of_row}, random_tokens(8, 60, 50, 1)), UserError);
}

// Mistral's sliding window: the full forward over a sequence longer than the window (index mask),
// the same sequence left padded (rotated), and KV-cached decoding (position mask) agree.
TEST(Llama, SlidingWindowAgreesAcrossPaths) {
  ModelConfig c = small_config();
  c.family = Family::mistral;
  c.sliding_window = 5;
  LlamaModel model(c, fresh_weights(c, torch::kFloat32));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = random_tokens(2, 20, c.vocab_size, 4);
  const torch::Tensor full = model.forward(tokens);
  KVCache cache = model.new_cache(2, 20);
  std::vector<torch::Tensor> parts{model.forward_cached(tokens.narrow(1, 0, 3), cache)};
  for (int64_t t = 3; t < 20; ++t) parts.push_back(model.forward_cached(tokens.narrow(1, t, 1), cache));
  EXPECT_LT(rel_error(torch::cat(parts, 1), full), 1e-5);
  const torch::Tensor padded = torch::cat({torch::zeros({2, 4}, torch::kLong), tokens}, 1);
  const torch::Tensor valid = torch::cat({torch::zeros({2, 4}, torch::kBool), torch::ones({2, 20}, torch::kBool)}, 1);
  EXPECT_LT(rel_error(model.forward(padded, valid).narrow(1, 4, 20), full), 1e-5);
  // Without the window the logits differ: the test would notice a mask that is not applied.
  ModelConfig unlimited = c;
  unlimited.sliding_window = 0;
  LlamaModel plain(unlimited, model.flat_weights());
  EXPECT_GT(rel_error(plain.forward(tokens).narrow(1, 10, 10), full.narrow(1, 10, 10)), 1e-3);
}

// Dropping rows from the cache (finished sequences) leaves the other rows decoding exactly as
// before; last_only returns the last position's logits.
TEST(Llama, KeepRowsDecodesTheKeptRowsUnchanged) {
  const ModelConfig c = small_config();
  LlamaModel model(c, fresh_weights(c, torch::kFloat32));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = random_tokens(5, 14, c.vocab_size, 12);
  KVCache all = model.new_cache(5, 16), some = model.new_cache(5, 16);
  const torch::Tensor pre = model.forward_cached(tokens.narrow(1, 0, 10), all);
  const torch::Tensor last = model.forward_cached(tokens.narrow(1, 0, 10), some, {}, /*last_only=*/true);
  EXPECT_LT(rel_error(last, pre.narrow(1, 9, 1)), 1e-6);
  const torch::Tensor keep = torch::tensor({0, 2, 4}, torch::kLong);
  some.keep_rows(keep);
  EXPECT_EQ(some.batch(), 3);
  for (int64_t t = 10; t < 14; ++t) {
    const torch::Tensor a = model.forward_cached(tokens.narrow(1, t, 1), all);
    const torch::Tensor b = model.forward_cached(tokens.narrow(1, t, 1).index_select(0, keep), some);
    EXPECT_LT(rel_error(b, a.index_select(0, keep)), 1e-6) << "step " << t;
  }
}

// model.activation_checkpointing recomputes each block in the backward pass: same loss, same
// gradients as keeping the activations (left-padded batch, GQA).
TEST(Llama, ActivationCheckpointingGivesTheSameGradients) {
  ModelConfig c = small_config();
  const torch::Tensor flat = fresh_weights(c, torch::kFloat32);
  const torch::Tensor tokens = random_tokens(3, 12, c.vocab_size, 17);
  torch::Tensor valid = torch::ones({3, 12}, torch::kBool);
  valid[1].narrow(0, 0, 4).fill_(false);
  std::vector<std::vector<torch::Tensor>> grads;
  std::vector<double> losses;
  for (bool checkpointing : {false, true}) {
    c.activation_checkpointing = checkpointing;
    LlamaModel model(c, flat.clone());
    model.set_requires_grad(true);
    const torch::Tensor logits = model.forward(tokens, valid);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(logits.narrow(1, 4, 8).reshape({-1, c.vocab_size}),
                                                                    tokens.narrow(1, 4, 8).reshape({-1}));
    loss.backward();
    losses.push_back(loss.item<double>());
    grads.emplace_back();
    for (const torch::Tensor& p : model.parameters()) grads.back().push_back(p.grad().clone());
  }
  EXPECT_EQ(losses[0], losses[1]);
  double worst = 0;
  for (std::size_t i = 0; i < grads[0].size(); ++i)
    worst = std::max(worst,
                     (grads[1][i] - grads[0][i]).abs().max().item<double>() / grads[0][i].abs().max().item<double>());
  std::printf("checkpointed vs plain gradients: max |difference| / max |gradient| = %.3g\n", worst);
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    const double scale = grads[0][i].abs().max().item<double>();
    EXPECT_GT(scale, 0.0) << i;
    EXPECT_LE((grads[1][i] - grads[0][i]).abs().max().item<double>(), 1e-6 * scale) << i;
  }
}

// Device-generic model: on a CUDA device (skipped without one) the logits equal the CPU's within
// 1e-4 of the largest (TF32 is off by default in libtorch), with padding, the KV cache and shared
// prompts.
TEST(Llama, CudaMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig c = small_config();
  const torch::Tensor flat = fresh_weights(c, torch::kFloat32);
  LlamaModel cpu(c, flat), gpu(c, flat.to(torch::kCUDA));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = random_tokens(3, 16, c.vocab_size, 2);
  torch::Tensor valid = torch::ones({3, 16}, torch::kBool);
  valid[0].narrow(0, 0, 5).fill_(false);
  EXPECT_LT(rel_error(gpu.forward(tokens.cuda(), valid.cuda()).cpu(), cpu.forward(tokens, valid)), 1e-4);
  KVCache a = cpu.new_cache(3, 20), b = gpu.new_cache(3, 20);
  EXPECT_LT(rel_error(gpu.forward_cached(tokens.cuda(), b, valid.cuda()).cpu(), cpu.forward_cached(tokens, a, valid)),
            1e-4);
  const torch::Tensor next = random_tokens(3, 1, c.vocab_size, 3);
  EXPECT_LT(rel_error(gpu.forward_cached(next.cuda(), b).cpu(), cpu.forward_cached(next, a)), 1e-4);
  // The training forward of GRPO groups (shared prompts, boolean-masked attention, GQA on CUDA).
  const torch::Tensor of_row = torch::tensor({0, 0, 1, 2, 2, 2}, torch::kLong);
  const torch::Tensor completions = random_tokens(6, 5, c.vocab_size, 4);
  const SharedPrompts on_cpu{tokens, valid, of_row}, on_gpu{tokens.cuda(), valid.cuda(), of_row.cuda()};
  EXPECT_LT(rel_error(gpu.forward_completions(on_gpu, completions.cuda()).cpu(),
                      cpu.forward_completions(on_cpu, completions)),
            1e-4);
}

}  // namespace
}  // namespace unstuck::model
