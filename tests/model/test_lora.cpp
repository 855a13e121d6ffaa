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
#include "common/model_shape.h"

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

// lora.init pissa is peft's init_lora_weights "pissa": the same adapters (each singular pair up to
// its sign, which an SVD leaves open: within 1e-4 of max |A| / max |B|; B A within 1e-5 of its max)
// and the same residual base (within 1e-5 of max |W|); the residual plus the adapters computes the
// base's logits (1e-5). Trained PiSSA adapters exported as a rank-2r adapter of the original base
// (pissa_as_lora, what final_adapter/ and `export --format peft` write) give, in peft, the logits of
// our residual plus them (1e-5 of max |logit|).
TEST_P(PeftLora, PissaIsPeftsAndExportsOntoTheOriginalBase) {
  const LoadedModel base = load_pretrained(dir() / "base");
  const LoadedAdapter peft = load_peft_adapter(dir() / "pissa_adapter", base.config);
  const LoadedModel peft_residual = load_pretrained(dir() / "pissa_residual");
  torch::Tensor residual = base.flat.clone();
  const torch::Tensor ours = pissa_init(base.config, peft.spec, residual, /*seed (unused by a full SVD)=*/0);
  const ParamLayout layout = lora_layout(base.config, peft.spec);
  const auto view = [](const torch::Tensor& t, const ParamEntry& e) {
    return t.narrow(0, e.offset, e.numel).view(e.shape);
  };
  double pair_err = 0, product_err = 0;
  for (std::size_t k = 0; k < layout.entries.size(); k += 2) {
    const ParamEntry &a = layout.entries[k], &b = layout.entries[k + 1];
    const torch::Tensor ao = view(ours, a), bo = view(ours, b), ap = view(peft.flat, a), bp = view(peft.flat, b);
    const torch::Tensor sign = (ao * ap).sum(1).sign();  // (r)
    pair_err = std::max({pair_err, max_abs(ao * sign.unsqueeze(1) - ap) / max_abs(ap),
                         max_abs(bo * sign.unsqueeze(0) - bp) / max_abs(bp)});
    const torch::Tensor po = bo.mm(ao), pp = bp.mm(ap);
    product_err = std::max(product_err, max_abs(po - pp) / max_abs(pp));
  }
  const double residual_err = max_abs(residual - peft_residual.flat) / max_abs(base.flat);
  std::printf("%s: PiSSA vs peft: A, B max |diff| (signs aligned) %.2e, B A %.2e, residual base %.2e\n",
              GetParam().c_str(), pair_err, product_err, residual_err);
  EXPECT_LT(pair_err, 1e-4);
  EXPECT_LT(product_err, 1e-5);
  EXPECT_LT(residual_err, 1e-5);

  const io::SafetensorsFile r = io::read_safetensors(dir() / "reference.safetensors");
  const torch::Tensor tokens = ref(r, "tokens").to(torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor base_logits = LlamaModel(base.config, base.flat.clone()).forward(tokens);
  const auto adapted_logits = [&](const torch::Tensor& adapters) {
    LlamaModel m(base.config, residual.clone());
    m.set_adapters(peft.spec, adapters.clone());
    return m.forward(tokens);
  };
  EXPECT_LT(max_abs(adapted_logits(ours) - base_logits) / max_abs(base_logits), 1e-5);
  torch::manual_seed(7);
  const torch::Tensor trained = ours + torch::randn_like(ours) * (0.05 * max_abs(ours));
  const torch::Tensor logits = adapted_logits(trained);
  const LoadedAdapter converted = pissa_as_lora(base.config, peft.spec, trained, ours);
  EXPECT_EQ(converted.spec.rank, 2 * peft.spec.rank);
  EXPECT_DOUBLE_EQ(converted.spec.scaling(), peft.spec.scaling());
  const fs::path out = dir() / "pissa_converted";
  fs::remove_all(out);
  save_peft_adapter(out, base.config, converted.spec, converted.flat);
  // Our own forward of the original base with the converted adapter agrees too.
  LlamaModel on_base(base.config, base.flat.clone());
  on_base.set_adapters(converted.spec, load_peft_adapter(out, base.config).flat);
  EXPECT_LT(max_abs(on_base.forward(tokens) - logits) / max_abs(logits), 1e-5);
  const torch::Tensor tokens_f = tokens.to(torch::kFloat32).contiguous(), logits_c = logits.contiguous();
  io::write_safetensors(
      out / "ours.safetensors",
      {{"tokens", io::DType::f32, tokens_f.sizes().vec(), tokens_f.data_ptr(), size_t(tokens_f.numel()) * 4},
       {"logits", io::DType::f32, logits_c.sizes().vec(), logits_c.data_ptr(), size_t(logits_c.numel()) * 4}});
  const std::string cmd = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR +
                          "/tests/model/peft_lora.py check_logits " + root_.string() + " " + GetParam() + " " +
                          out.string() + " " + (out / "ours.safetensors").string() + " 2>&1 | grep -v Warn";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  fs::remove_all(out);
}

// lora.pissa_niter N is peft's init_lora_weights "pissa_niter_N" (a randomized SVD): on a base whose
// matrices have a fast-decaying spectrum (singular values 0.5 * 0.25^i, where 4 iterations converge),
// ours and peft's give the same B A (within 1e-5 of its max) and residual (1e-5 of max |W|), and so
// does the full SVD. On any base (the random one: a flat spectrum, where the triplets are only
// approximate) the residual plus the adapters computes the base's logits (1e-5 of max |logit|); the
// same seed gives the same bits, another seed other adapters.
TEST_P(PeftLora, PissaNiterIsPeftsRandomizedSvd) {
  const LoadedModel spectral = load_pretrained(dir() / "spectral_base");
  const LoadedAdapter peft = load_peft_adapter(dir() / "pissa_niter_adapter", spectral.config);
  const LoadedModel peft_residual = load_pretrained(dir() / "pissa_niter_residual");
  LoraSpec fast = peft.spec;
  fast.pissa_niter = 4;
  torch::Tensor residual = spectral.flat.clone(), exact_residual = spectral.flat.clone();
  const torch::Tensor ours = pissa_init(spectral.config, fast, residual, 11);
  const torch::Tensor exact = pissa_init(spectral.config, peft.spec, exact_residual, 0);
  const ParamLayout layout = lora_layout(spectral.config, fast);
  const auto view = [](const torch::Tensor& t, const ParamEntry& e) {
    return t.narrow(0, e.offset, e.numel).view(e.shape);
  };
  const auto product = [&](const torch::Tensor& flat, std::size_t k) {
    return view(flat, layout.entries[k + 1]).mm(view(flat, layout.entries[k]));  // B A (out, in)
  };
  double vs_peft = 0, vs_exact = 0;
  for (std::size_t k = 0; k < layout.entries.size(); k += 2) {
    const torch::Tensor po = product(ours, k), pp = product(peft.flat, k);
    vs_peft = std::max(vs_peft, max_abs(po - pp) / max_abs(pp));
    vs_exact = std::max(vs_exact, max_abs(po - product(exact, k)) / max_abs(pp));
  }
  const double residual_err = max_abs(residual - peft_residual.flat) / max_abs(spectral.flat);
  const double residual_exact = max_abs(residual - exact_residual) / max_abs(spectral.flat);
  std::printf(
      "%s: PiSSA niter 4 vs peft's pissa_niter_4: B A max |diff| %.2e (vs the full SVD %.2e), residual %.2e "
      "(%.2e)\n",
      GetParam().c_str(), vs_peft, vs_exact, residual_err, residual_exact);
  EXPECT_LT(vs_peft, 1e-5);
  EXPECT_LT(vs_exact, 1e-5);
  EXPECT_LT(residual_err, 1e-5);
  EXPECT_LT(residual_exact, 1e-5);

  const LoadedModel base = load_pretrained(dir() / "base");
  LoraSpec two = peft.spec;
  two.pissa_niter = 2;
  torch::Tensor r1 = base.flat.clone(), r2 = base.flat.clone(), r3 = base.flat.clone();
  const torch::Tensor a1 = pissa_init(base.config, two, r1, 3), a2 = pissa_init(base.config, two, r2, 3);
  const torch::Tensor a3 = pissa_init(base.config, two, r3, 4);
  EXPECT_TRUE(torch::equal(a1, a2));
  EXPECT_TRUE(torch::equal(r1, r2));
  EXPECT_FALSE(torch::equal(a1, a3));
  const io::SafetensorsFile r = io::read_safetensors(dir() / "reference.safetensors");
  const torch::Tensor tokens = ref(r, "tokens").to(torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor base_logits = LlamaModel(base.config, base.flat.clone()).forward(tokens);
  LlamaModel adapted(base.config, r1.clone());
  adapted.set_adapters(two, a1.clone());
  EXPECT_LT(max_abs(adapted.forward(tokens) - base_logits) / max_abs(base_logits), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Variants, PeftLora, ::testing::Values("llama", "qwen2"),
                         [](const auto& info) { return info.param; });

// lora.dropout's masks: each element dropped with probability p (2048 x 128 elements at p = 0.1:
// within 0.003, 5 standard deviations), a pure function of (key, layer, module, row id, position,
// feature): the same bits again, for a row computed alone, and other bits for another key, layer
// or a prompt pass; p = 0 keeps everything.
TEST(LoraDropout, MasksAreCounterBasedAndDropAtTheRate) {
  const torch::Tensor positions = torch::arange(64, torch::kLong).repeat({2, 1});  // (2, 64)
  const DropoutPass pass{12345, false, torch::tensor({3, 8}, torch::kLong), positions};
  const torch::Tensor keep = lora_dropout_keep(pass, 1, LoraModule::v_proj, 2048, 0.1);
  ASSERT_EQ(keep.sizes(), (std::vector<int64_t>{2, 64, 2048}));
  const double dropped = 1.0 - keep.to(torch::kFloat64).mean().item<double>();
  std::printf("lora.dropout 0.1: dropped fraction %.5f of %lld elements\n", dropped,
              static_cast<long long>(keep.numel()));
  EXPECT_NEAR(dropped, 0.1, 0.003);
  EXPECT_TRUE(torch::equal(keep, lora_dropout_keep(pass, 1, LoraModule::v_proj, 2048, 0.1)));
  const DropoutPass alone{12345, false, torch::tensor({8}, torch::kLong), positions.narrow(0, 1, 1)};
  EXPECT_TRUE(torch::equal(keep.narrow(0, 1, 1), lora_dropout_keep(alone, 1, LoraModule::v_proj, 2048, 0.1)));
  const auto same_frac = [&](const torch::Tensor& other) {
    return keep.eq(other).to(torch::kFloat64).mean().item<double>();
  };
  const DropoutPass other_key{12346, false, pass.ids, positions}, prompts{12345, true, pass.ids, positions};
  // Independent masks agree on 0.9^2 + 0.1^2 = 82% of the elements.
  EXPECT_LT(same_frac(lora_dropout_keep(other_key, 1, LoraModule::v_proj, 2048, 0.1)), 0.9);
  EXPECT_LT(same_frac(lora_dropout_keep(pass, 0, LoraModule::v_proj, 2048, 0.1)), 0.9);
  EXPECT_LT(same_frac(lora_dropout_keep(pass, 1, LoraModule::k_proj, 2048, 0.1)), 0.9);
  EXPECT_LT(same_frac(lora_dropout_keep(prompts, 1, LoraModule::v_proj, 2048, 0.1)), 0.9);
  EXPECT_TRUE(lora_dropout_keep(pass, 1, LoraModule::v_proj, 2048, 0.0).all().item<bool>());
}

// On CUDA (skipped without a device) the kernel draws the CPU's bits, and the adapter product with
// dropout is the CPU's (FP32, within 1e-5 relative).
TEST(LoraDropout, CudaMasksAreTheCpus) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Tensor positions = torch::arange(37, torch::kLong).repeat({3, 1}) + 5;  // (3, 37)
  const DropoutPass cpu{4242, true, torch::tensor({0, 7, 1000000}, torch::kLong), positions};
  const DropoutPass gpu{4242, true, cpu.ids.cuda(), positions.cuda()};
  for (int64_t features : {1, 5, 896, 4867})
    EXPECT_TRUE(torch::equal(lora_dropout_keep(cpu, 3, LoraModule::o_proj, features, 0.05),
                             lora_dropout_keep(gpu, 3, LoraModule::o_proj, features, 0.05).cpu()))
        << features;
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({3, 37, 64}), a = torch::randn({8, 64});
  const torch::Tensor want = lora_dropout_linear(x, a, cpu, 2, LoraModule::up_proj, 0.2);
  const torch::Tensor got = lora_dropout_linear(x.cuda(), a.cuda(), gpu, 2, LoraModule::up_proj, 0.2).cpu();
  EXPECT_LT(max_abs(got - want) / max_abs(want), 1e-5);
}

// The adapter's first product with dropout is PEFT's lora_A(nn.Dropout(x)) = (x * keep / (1 - p)) A^T
// for the pass's bits, and its gradients (which regenerate the bits) are autograd's of that formula
// (FP32, within 1e-6 relative).
TEST(LoraDropout, LinearIsDropoutThenA) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 5, 16}).requires_grad_(true), a = torch::randn({4, 16}).requires_grad_(true);
  const DropoutPass pass{99, false, torch::tensor({0, 1}, torch::kLong), torch::arange(5, torch::kLong).repeat({2, 1})};
  const torch::Tensor y = lora_dropout_linear(x, a, pass, 1, LoraModule::down_proj, 0.25);
  const torch::Tensor g = torch::randn_like(y);
  const auto [dx, da] = [&] {
    const auto grads = torch::autograd::grad({y}, {x, a}, {g});
    return std::make_pair(grads[0], grads[1]);
  }();
  const torch::Tensor keep = lora_dropout_keep(pass, 1, LoraModule::down_proj, 16, 0.25);
  const torch::Tensor want = at::linear(x * keep / 0.75, a);
  const auto grads = torch::autograd::grad({want}, {x, a}, {g});
  EXPECT_LT(max_abs(y - want) / max_abs(want), 1e-6);
  EXPECT_LT(max_abs(dx - grads[0]) / max_abs(grads[0]), 1e-6);
  EXPECT_LT(max_abs(da - grads[1]) / max_abs(grads[1]), 1e-6);
  EXPECT_GT(keep.eq(0).sum().item<int64_t>(), 0);  // some of the 160 elements were dropped
}

// A training forward with lora.dropout (shared prompts: 2 prompts x 2 rows): the same hidden states
// again (bit for bit), others than without dropout, rows 2-3 computed alone equal to their part of
// the whole (within 1e-6: the masks are keyed by row ids, not batch places); activation
// checkpointing regenerates the masks, so its adapter gradients are the plain pass's (within 1e-5).
// With lora.dropout 0 the rows change nothing.
TEST(LoraDropout, TrainingForwardIsReproducibleAndRowLocal) {
  ModelConfig config = testing::model_shape(50, 64, 2, 4, 2, 96, 64);
  const ParamLayout layout = llama_layout(config);
  torch::Tensor base = torch::empty({layout.total}, torch::kFloat32);
  init_llama_weights(layout, config, base, 1);
  LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 8;
  lc.dropout = 0.3;
  const LoraSpec spec = lora_spec(lc);
  torch::Tensor adapters = init_lora(config, spec, LoraInit::gaussian, 5);
  torch::manual_seed(11);
  adapters += torch::randn_like(adapters) * 0.05;  // B off zero, so the adapters matter
  torch::manual_seed(12);
  const SharedPrompts sp{torch::randint(50, {2, 6}, torch::kLong), {}, torch::tensor({0, 0, 1, 1}, torch::kLong)};
  const torch::Tensor completions = torch::randint(50, {4, 5}, torch::kLong);
  const DropoutRows rows{777, torch::tensor({0, 1, 2, 3}, torch::kLong), torch::tensor({0, 1}, torch::kLong)};
  struct Out {
    torch::Tensor hidden;
    std::vector<torch::Tensor> grads;
  };
  const auto run = [&](const LoraSpec& s, bool checkpointing, const DropoutRows* d) {
    ModelConfig c = config;
    c.activation_checkpointing = checkpointing;
    LlamaModel model(c, base.clone());
    model.set_adapters(s, adapters.clone());
    for (const torch::Tensor& p : model.adapter_parameters()) p.set_requires_grad(true);
    Out out;
    out.hidden = model.forward_completions_hidden(sp, completions, d);
    out.hidden.sum().backward();
    for (const torch::Tensor& p : model.adapter_parameters()) out.grads.push_back(p.grad().clone());
    out.hidden = out.hidden.detach();
    return out;
  };
  const Out plain = run(spec, false, &rows);
  EXPECT_TRUE(torch::equal(plain.hidden, run(spec, false, &rows).hidden));
  const Out none = run(spec, false, nullptr);
  EXPECT_GT(max_abs(plain.hidden - none.hidden), 1e-4);
  LoraSpec off = spec;
  off.dropout = 0;
  EXPECT_TRUE(torch::equal(run(off, false, &rows).hidden, run(off, false, nullptr).hidden));
  {
    LlamaModel model(config, base.clone());
    model.set_adapters(spec, adapters.clone());
    torch::NoGradGuard no_grad;
    const SharedPrompts second{sp.tokens.narrow(0, 1, 1), {}, torch::tensor({0, 0}, torch::kLong)};
    const DropoutRows part{777, torch::tensor({2, 3}, torch::kLong), torch::tensor({1}, torch::kLong)};
    const torch::Tensor alone = model.forward_completions_hidden(second, completions.narrow(0, 2, 2), &part);
    EXPECT_LT(max_abs(alone - plain.hidden.narrow(0, 2, 2)) / max_abs(alone), 1e-6);
  }
  const Out ckpt = run(spec, true, &rows);
  EXPECT_LT(max_abs(ckpt.hidden - plain.hidden) / max_abs(plain.hidden), 1e-6);
  ASSERT_EQ(ckpt.grads.size(), plain.grads.size());
  for (std::size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_LT(max_abs(ckpt.grads[i] - plain.grads[i]) / max_abs(plain.grads[i]), 1e-5) << i;
}

}  // namespace
}  // namespace unstuck::model
