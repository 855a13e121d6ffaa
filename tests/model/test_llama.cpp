// Llama model: the KV-cached path equals the full forward (FP32: 1e-5 relative; BF16: stated
// tolerance), left padding with a validity mask equals the unpadded sequence, parameters view the
// flat buffer, gradients reach every parameter, and bad buffers are rejected.
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

}  // namespace
}  // namespace unstuck::model
