// LoRA against peft (tests/model/peft_lora.py: a Llama with all seven projections adapted, a Qwen2 with
// biases, tied embeddings, rsLoRA and four targets): a PEFT adapter directory loads, and the model
// with it gives peft's FP32 logits (within 1e-5 of max |logit|) and the gradients of every lora_A /
// lora_B (within 1e-4 of each tensor's max |grad|), with and without activation checkpointing (within
// 1e-6 / 1e-5 of each other); cached decoding gives the full forward's logits; merge_lora equals merge_and_unload;
// adapter_config.json settings that are not computed are refused by name; save_peft_adapter's
// directory loads back bit for bit and in peft with the reference logits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors.h"
#include "unstuck/model/llama.h"
#include "unstuck/model/lora.h"
#include "unstuck/model/model_io.h"

namespace unstuck::model {
namespace {

namespace fs = std::filesystem;

class PeftLora : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("unstuck_lora_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    const std::string cmd = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR + "/tests/model/peft_lora.py make " +
                            root_.string() + " > /dev/null 2>&1";
    made_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  void SetUp() override { ASSERT_TRUE(made_) << "tests/model/peft_lora.py make failed (is peft installed?)"; }
  fs::path dir() const { return root_ / GetParam(); }

  static torch::Tensor ref(const io::SafetensorsFile& f, const std::string& name) {
    const io::Tensor& t = f.at(name);
    return torch::from_blob(const_cast<uint8_t*>(t.bytes.data()), t.shape, torch::kFloat32).clone();
  }
  static fs::path root_;
  static bool made_;
};
fs::path PeftLora::root_;
bool PeftLora::made_ = false;

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// The adapted model's logits of the reference tokens and the adapters' gradients of sum(logits * R).
struct Pass {
  torch::Tensor logits;
  std::vector<torch::Tensor> grads;
};
Pass run_pass(ModelConfig config, const torch::Tensor& base, const LoadedAdapter& adapter, const torch::Tensor& tokens,
              const torch::Tensor& weight, bool checkpointing) {
  config.activation_checkpointing = checkpointing;
  LlamaModel model(config, base.clone());
  model.set_adapters(adapter.spec, adapter.flat.clone());
  model.set_requires_grad(false);
  for (const torch::Tensor& p : model.adapter_parameters()) p.set_requires_grad(true);
  Pass out;
  out.logits = model.forward(tokens);
  (out.logits * weight).sum().backward();
  for (const torch::Tensor& p : model.adapter_parameters()) out.grads.push_back(p.grad().clone());
  out.logits = out.logits.detach();
  return out;
}

TEST_P(PeftLora, LogitsAndAdapterGradientsArePefts) {
  const LoadedModel base = load_pretrained(dir() / "base");
  const LoadedAdapter adapter = load_peft_adapter(dir() / "adapter", base.config);
  const io::SafetensorsFile r = io::read_safetensors(dir() / "reference.safetensors");
  const torch::Tensor tokens = ref(r, "tokens").to(torch::kLong), weight = ref(r, "weight");
  const Pass plain = run_pass(base.config, base.flat, adapter, tokens, weight, false);
  const torch::Tensor want = ref(r, "logits");
  const double logit_err = max_abs(plain.logits - want) / max_abs(want);
  std::printf("%s: r %lld, %zu adapter tensors, logits max |diff| / max |logit| = %.2e\n", GetParam().c_str(),
              static_cast<long long>(adapter.spec.rank), plain.grads.size(), logit_err);
  EXPECT_LT(logit_err, 1e-5);
  const ParamLayout layout = lora_layout(base.config, adapter.spec);
  ASSERT_EQ(plain.grads.size(), layout.entries.size());
  double worst = 0;
  for (std::size_t i = 0; i < layout.entries.size(); ++i) {
    const torch::Tensor g = ref(r, layout.entries[i].name);
    const double err = max_abs(plain.grads[i] - g) / max_abs(g);
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-4) << layout.entries[i].name;
  }
  std::printf("%s: adapter gradients max |diff| / max |grad| = %.2e (worst tensor)\n", GetParam().c_str(), worst);
  // Activation checkpointing recomputes each block: the same logits and gradients up to the order of
  // sums (its first pass runs without autograd, where libtorch may fold the products differently).
  const Pass ckpt = run_pass(base.config, base.flat, adapter, tokens, weight, true);
  EXPECT_LT(max_abs(ckpt.logits - plain.logits) / max_abs(plain.logits), 1e-6);
  for (std::size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_LT(max_abs(ckpt.grads[i] - plain.grads[i]) / max_abs(plain.grads[i]), 1e-5) << layout.entries[i].name;
}

TEST_P(PeftLora, CachedDecodingAndMergedWeightsAgree) {
  const LoadedModel base = load_pretrained(dir() / "base");
  const LoadedAdapter adapter = load_peft_adapter(dir() / "adapter", base.config);
  const io::SafetensorsFile r = io::read_safetensors(dir() / "reference.safetensors");
  const torch::Tensor tokens = ref(r, "tokens").to(torch::kLong);
  torch::NoGradGuard no_grad;
  LlamaModel model(base.config, base.flat.clone());
  model.set_adapters(adapter.spec, adapter.flat.clone());
  const torch::Tensor full = model.forward(tokens);
  // Prefill of 5 tokens, then one at a time: each position's logits are the full forward's.
  KVCache cache = model.new_cache(tokens.size(0), tokens.size(1));
  std::vector<torch::Tensor> parts{model.forward_cached(tokens.narrow(1, 0, 5), cache)};
  for (int64_t t = 5; t < tokens.size(1); ++t) parts.push_back(model.forward_cached(tokens.narrow(1, t, 1), cache));
  EXPECT_LT(max_abs(torch::cat(parts, 1) - full) / max_abs(full), 1e-5);
  // merge_lora is peft's merge_and_unload, and the merged model computes the adapted one.
  const torch::Tensor merged = merge_lora(base.config, base.flat, adapter.spec, adapter.flat);
  const LoadedModel peft_merged = load_pretrained(dir() / "merged");
  const double merge_err = max_abs(merged - peft_merged.flat);
  std::printf("%s: merged weights max |diff| vs merge_and_unload = %.2e\n", GetParam().c_str(), merge_err);
  EXPECT_LT(merge_err, 1e-6);
  const LlamaModel merged_model(base.config, merged);
  EXPECT_LT(max_abs(merged_model.forward(tokens) - full) / max_abs(full), 1e-5);
}

// adapter_config.json: what is not computed is refused, naming the key or the tensor.
TEST_P(PeftLora, SettingsThatAreNotComputedAreRefusedByName) {
  const LoadedModel base = load_pretrained(dir() / "base");
  const fs::path edited = dir() / "edited";
  const auto expect_refused = [&](const std::string& key, const nlohmann::json& value, const std::string& why) {
    fs::remove_all(edited);
    fs::copy(dir() / "adapter", edited);
    nlohmann::json c = io::read_json_file(edited / "adapter_config.json");
    c[key] = value;
    io::write_json_file(edited / "adapter_config.json", c);
    try {
      load_peft_adapter(edited, base.config);
      ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  expect_refused("use_dora", true, "key 'use_dora' is true");
  expect_refused("bias", "all", "key 'bias' is \"all\"");
  expect_refused("modules_to_save", nlohmann::json::array({"lm_head"}), "key 'modules_to_save'");
  expect_refused("layers_to_transform", nlohmann::json::array({0}), "key 'layers_to_transform'");
  expect_refused("target_modules", ".*q_proj", "a regular expression is not matched");
  expect_refused("target_modules", nlohmann::json::array({"q_proj", "lm_head"}), "'lm_head' is not a projection");
  expect_refused("target_modules", nlohmann::json::array({"model.layers.0.self_attn.q_proj"}),
                 "q_proj is adapted in 1 of 2 layers");
  expect_refused("target_modules", nlohmann::json::array({"model.layers.7.mlp.up_proj"}), "matches no module");
  expect_refused("peft_type", "IA3", "unstuck loads LORA adapters");
  // A rank the file does not hold: the tensor's shape is named.
  expect_refused("r", 2, "the model needs [2,48]");
  // Informational keys with any value are fine.
  fs::remove_all(edited);
  fs::copy(dir() / "adapter", edited);
  nlohmann::json c = io::read_json_file(edited / "adapter_config.json");
  c["base_model_name_or_path"] = "Qwen/Qwen2.5-0.5B";
  c["lora_dropout"] = 0.05;
  io::write_json_file(edited / "adapter_config.json", c);
  EXPECT_NO_THROW(load_peft_adapter(edited, base.config));
  fs::remove_all(edited);
}

// save_peft_adapter writes what load_peft_adapter reads back bit for bit, and what peft loads onto
// the base with the reference logits.
TEST_P(PeftLora, SavedAdapterLoadsBackAndInPeft) {
  const LoadedModel base = load_pretrained(dir() / "base");
  const LoadedAdapter adapter = load_peft_adapter(dir() / "adapter", base.config);
  const fs::path out = dir() / "saved";
  fs::remove_all(out);
  save_peft_adapter(out, base.config, adapter.spec, adapter.flat, (dir() / "base").string());
  const LoadedAdapter again = load_peft_adapter(out, base.config);
  EXPECT_EQ(again.spec.rank, adapter.spec.rank);
  EXPECT_EQ(again.spec.alpha, adapter.spec.alpha);
  EXPECT_EQ(again.spec.rslora, adapter.spec.rslora);
  EXPECT_EQ(again.spec.targets, adapter.spec.targets);
  EXPECT_TRUE(torch::equal(again.flat, adapter.flat));
  const std::string cmd = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR + "/tests/model/peft_lora.py check " +
                          root_.string() + " " + GetParam() + " " + out.string() + " 2>&1 | grep -v Warn";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Variants, PeftLora, ::testing::Values("llama", "qwen2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace unstuck::model
