// Model families against transformers, both directions: checkpoints that transformers builds
// (tests/model/hf_families.py: Llama untied / tied / head_dim / biases / llama3, linear and yarn RoPE,
// Qwen2, Qwen3, Mistral with a sliding window; FP32 and BF16; single and sharded) load here with FP32
// logits within 1e-4 of max |logit| and identical 64-token greedy continuations; the same models
// exported by save_pretrained load in transformers with the same logits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "unstuck/io/json_file.h"
#include "unstuck/model/llama.h"
#include "unstuck/model/model_io.h"

namespace unstuck::model {
namespace {

namespace fs = std::filesystem;

const char* const kVariants[] = {
    "llama_untied",  "llama_tied_head_dim_llama3", "llama_bias_linear", "llama_yarn", "qwen2_tied", "qwen3_head_dim",
    "mistral_window"};

int run_python(const std::string& args) {
  const std::string cmd =
      std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR + "/tests/model/hf_families.py " + args + " 2>&1";
  return std::system(cmd.c_str());
}

torch::Tensor nested_tensor(const nlohmann::json& rows) {  // 2-D or 3-D list of numbers
  std::vector<float> flat;
  std::vector<int64_t> shape{int64_t(rows.size())};
  for (const auto& r : rows) {
    if (r[0].is_array()) {
      if (shape.size() == 1) shape.insert(shape.end(), {int64_t(r.size()), int64_t(r[0].size())});
      for (const auto& c : r)
        for (const auto& v : c) flat.push_back(v.get<float>());
    } else {
      if (shape.size() == 1) shape.push_back(int64_t(r.size()));
      for (const auto& v : r) flat.push_back(v.get<float>());
    }
  }
  return torch::tensor(flat).view(shape);
}

class Families : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("unstuck_families_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    made_ = run_python("make " + root_.string() + " > /dev/null") == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static fs::path root_;
  static bool made_;
};
fs::path Families::root_;
bool Families::made_ = false;

// Greedy continuation with the KV cache, as a rollout decodes.
std::vector<std::vector<int64_t>> greedy(const LlamaModel& model, const torch::Tensor& prompts, int64_t steps) {
  KVCache cache = model.new_cache(prompts.size(0), prompts.size(1) + steps);
  torch::Tensor next = model.forward_cached(prompts, cache).select(1, -1).argmax(-1, true);  // (B, 1)
  std::vector<torch::Tensor> out{next};
  for (int64_t s = 1; s < steps; ++s) {
    next = model.forward_cached(next, cache).select(1, -1).argmax(-1, true);
    out.push_back(next);
  }
  const torch::Tensor all = torch::cat(out, 1).contiguous();
  std::vector<std::vector<int64_t>> rows;
  for (int64_t b = 0; b < all.size(0); ++b)
    rows.emplace_back(all[b].data_ptr<int64_t>(), all[b].data_ptr<int64_t>() + steps);
  return rows;
}

TEST_F(Families, TransformersCheckpointsGiveSameLogitsAndGreedyTokens) {
  ASSERT_TRUE(made_) << "transformers fixture failed";
  torch::NoGradGuard no_grad;
  for (const char* name : kVariants) {
    SCOPED_TRACE(name);
    const fs::path dir = root_ / name;
    const nlohmann::json ref = io::read_json_file(dir / "reference.json");
    const LoadedModel loaded = load_pretrained(dir);
    const LlamaModel model(loaded.config, loaded.flat);
    const torch::Tensor prompts = nested_tensor(ref["prompts"]).to(torch::kLong);
    const torch::Tensor want = nested_tensor(ref["logits"]);
    const torch::Tensor logits = model.forward(prompts);
    const double scale = want.abs().max().item<double>();
    const double rel = (logits - want).abs().max().item<double>() / scale;
    std::printf("%-28s max |unstuck - transformers| / max |logit| = %.3g (max |logit| %.3g)\n", name, rel, scale);
    EXPECT_LT(rel, 1e-4);
    EXPECT_GT(scale, 0.5);  // the comparison is not between near-zeros
    const auto tokens = greedy(model, prompts, int64_t(ref["greedy"][0].size()));
    EXPECT_EQ(tokens, ref["greedy"].get<std::vector<std::vector<int64_t>>>());
  }
  // What each variant was meant to exercise actually reached the loaded config.
  EXPECT_EQ(load_pretrained(root_ / "qwen2_tied").config.qkv_bias, true);
  EXPECT_EQ(load_pretrained(root_ / "qwen3_head_dim").config.qk_norm, true);
  EXPECT_EQ(load_pretrained(root_ / "mistral_window").config.sliding_window, 16);
  const LoadedModel l3 = load_pretrained(root_ / "llama_tied_head_dim_llama3");
  EXPECT_EQ(l3.config.rope_scaling.type, RopeType::llama3);
  EXPECT_EQ(l3.config.head_dim(), 24);
  EXPECT_EQ(l3.tokens.eos_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(fs::exists(root_ / "llama_tied_head_dim_llama3" / "model.safetensors.index.json"));
  EXPECT_EQ(load_pretrained(root_ / "llama_yarn").config.rope_scaling.type, RopeType::yarn);
  EXPECT_TRUE(load_pretrained(root_ / "llama_bias_linear").config.o_bias);
}

TEST_F(Families, ExportsLoadInTransformersWithSameLogits) {
  ASSERT_TRUE(made_) << "transformers fixture failed";
  torch::NoGradGuard no_grad;
  const fs::path out_root = root_ / "exported";
  const char* arch[] = {"LlamaForCausalLM", "LlamaForCausalLM", "LlamaForCausalLM",  "LlamaForCausalLM",
                        "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"};
  for (std::size_t i = 0; i < std::size(kVariants); ++i) {
    const LoadedModel loaded = load_pretrained(root_ / kVariants[i]);
    // Alternate the forms: sharded FP32, single BF16 (weights moved onto the BF16 grid first so the
    // export is exact and the logits comparable).
    const bool bf16 = i % 2 == 1;
    const torch::Tensor flat = bf16 ? loaded.flat.to(torch::kBFloat16) : loaded.flat;
    const fs::path dir = out_root / kVariants[i];
    save_pretrained(dir, loaded.config, flat, bf16 ? io::DType::bf16 : io::DType::f32, loaded.tokens,
                    bf16 ? 0 : 16 * 1024);
    EXPECT_EQ(fs::exists(dir / "model.safetensors.index.json"), !bf16);
    const LlamaModel model(loaded.config, flat.to(torch::kFloat32));
    const torch::Tensor tokens = torch::randint(0, loaded.config.vocab_size, {2, 12}, torch::kLong);
    const torch::Tensor logits = model.forward(tokens);
    nlohmann::json out;
    out["architecture"] = arch[i];
    out["tokens"] = nlohmann::json::array();
    out["logits"] = nlohmann::json::array();
    for (int64_t b = 0; b < 2; ++b) {
      out["tokens"].push_back(std::vector<int64_t>(tokens[b].data_ptr<int64_t>(), tokens[b].data_ptr<int64_t>() + 12));
      nlohmann::json rows = nlohmann::json::array();
      for (int64_t t = 0; t < 12; ++t) {
        const torch::Tensor l = logits[b][t].contiguous();
        rows.push_back(std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + l.numel()));
      }
      out["logits"].push_back(rows);
    }
    io::write_json_file(dir / "unstuck_logits.json", out, -1);
    // Our own reader agrees with what we wrote, bit for bit.
    EXPECT_TRUE(torch::equal(load_pretrained(dir).flat, flat.to(torch::kFloat32))) << kVariants[i];
  }
  EXPECT_EQ(run_python("check " + out_root.string()), 0);
}

}  // namespace
}  // namespace unstuck::model
