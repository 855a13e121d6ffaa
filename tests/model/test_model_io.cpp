// Model directories: real interoperability with Hugging Face transformers in both directions (FP32
// logits within 1e-4), BF16 round trips, and a clear error for every malformed checkpoint.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/lazy_zeros.h"
#include "unstuck/model/llama.h"
#include "unstuck/model/model_io.h"
#include "common/model_shape.h"

namespace unstuck::model {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_model_io_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

using testing::model_shape;

torch::Tensor random_weights(const ModelConfig& c, uint64_t seed) {
  const ParamLayout layout = llama_layout(c);
  torch::Tensor flat = torch::empty({layout.total});
  init_llama_weights(layout, c, flat, seed);
  return flat;
}

int run_python(const std::string& args) {
  const std::string cmd = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR + "/tests/model/hf_interop.py " + args;
  return std::system(cmd.c_str());
}

torch::Tensor tokens_tensor(const nlohmann::json& tokens) {
  std::vector<int64_t> flat;
  for (const auto& row : tokens)
    for (const auto& t : row) flat.push_back(t.get<int64_t>());
  return torch::tensor(flat).view({int64_t(tokens.size()), -1});
}

TEST(ModelIo, LoadsTransformersCheckpointWithSameLogits) {
  const fs::path dir = temp_dir("hf");
  ASSERT_EQ(run_python("make " + dir.string()), 0) << "transformers fixture failed";
  const LoadedModel loaded = load_pretrained(dir);
  EXPECT_EQ(loaded.config.n_kv_heads, 2);
  EXPECT_EQ(loaded.tokens.eos, 3);
  const LlamaModel model(loaded.config, loaded.flat);
  const nlohmann::json ref = io::read_json_file(dir / "hf_logits.json");
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model.forward(tokens_tensor(ref["tokens"]));
  std::vector<float> expected;
  for (const auto& row : ref["logits"])
    for (const auto& pos : row)
      for (const auto& v : pos) expected.push_back(v.get<float>());
  const torch::Tensor want = torch::tensor(expected).view(logits.sizes());
  EXPECT_LT((logits - want).abs().max().item<double>(), 1e-4);
  EXPECT_GT(want.abs().max().item<double>(), 0.5);  // the comparison is not between near-zeros
  fs::remove_all(dir);
}

TEST(ModelIo, SavedModelLoadsInTransformersWithSameLogits) {
  ModelConfig c = model_shape(61, 64, 2, 4, 2, 96);
  c.max_seq_len = 64;
  c.init_std = 0.2;
  const torch::Tensor flat = random_weights(c, 5);
  const fs::path dir = temp_dir("ours");
  save_pretrained(dir, c, flat, io::DType::f32, {2, 3, 0});
  const LlamaModel model(c, flat);
  const torch::Tensor tokens = torch::randint(0, c.vocab_size, {2, 10}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model.forward(tokens);
  nlohmann::json out;
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int64_t> row(tokens[b].data_ptr<int64_t>(), tokens[b].data_ptr<int64_t>() + 10);
    out["tokens"].push_back(row);
    nlohmann::json rows = nlohmann::json::array();
    for (int64_t t = 0; t < 10; ++t) {
      const torch::Tensor l = logits[b][t].contiguous();
      rows.push_back(std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + c.vocab_size));
    }
    out["logits"].push_back(rows);
  }
  io::write_json_file(dir / "unstuck_logits.json", out, -1);
  EXPECT_EQ(run_python("check " + dir.string()), 0);
  fs::remove_all(dir);
}

TEST(ModelIo, Bf16RoundTripIsExactOnTheBf16Grid) {
  ModelConfig c = model_shape(30, 32, 1, 2, 2, 48);
  c.tie_embeddings = true;
  const torch::Tensor flat = random_weights(c, 1);
  const fs::path dir = temp_dir("bf16");
  save_pretrained(dir, c, flat, io::DType::bf16, {});
  const LoadedModel back = load_pretrained(dir);
  EXPECT_TRUE(back.config.tie_embeddings);
  EXPECT_TRUE(torch::equal(back.flat, flat.to(torch::kBFloat16).to(torch::kFloat32)));
  fs::remove_all(dir);
}

// Rewrites dir's safetensors with `edit` applied to the tensor list, then expects `needle` in the
// load error.
void expect_load_error(const std::function<void(std::vector<io::Tensor>&)>& edit, const std::string& needle) {
  const ModelConfig c = model_shape(20, 16, 1, 2, 1, 24);
  const torch::Tensor flat = random_weights(c, 1);
  const fs::path dir = temp_dir("bad");
  save_pretrained(dir, c, flat, io::DType::f32, {});
  io::SafetensorsFile file = io::read_safetensors(dir / "model.safetensors");
  edit(file.tensors);
  std::vector<io::TensorView> views;
  for (const io::Tensor& t : file.tensors) views.push_back(io::view_of(t));
  io::write_safetensors(dir / "model.safetensors", views);
  try {
    load_pretrained(dir);
    ADD_FAILURE() << "expected an error containing: " << needle;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(ModelIo, MissingExtraAndMisshapenTensorsAreNamed) {
  expect_load_error([](auto& ts) { ts.erase(ts.begin()); }, "missing tensor 'lm_head.weight'");
  expect_load_error(
      [](auto& ts) {
        ts.push_back(ts.back());
        ts.back().name = "model.extra.weight";
      },
      "unexpected tensor 'model.extra.weight'");
  expect_load_error(
      [](auto& ts) {
        for (auto& t : ts)
          if (t.name == "model.norm.weight") {
            t.shape = {8, 2};
          }
      },
      "tensor 'model.norm.weight' has shape [8, 2], expected [16]");
}

TEST(ModelIo, BadConfigJsonIsNamed) {
  const fs::path dir = temp_dir("cfg");
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "vocab_size": 10, "hidden_size": "wide"})";
  try {
    load_pretrained(dir);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hidden_size"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Rewrites dir/config.json with `edit` applied, then expects `needles` in the load error.
void expect_config_error(const std::function<void(nlohmann::json&)>& edit, const std::vector<std::string>& needles) {
  const ModelConfig c = model_shape(20, 16, 2, 2, 1, 24);
  const fs::path dir = temp_dir("cfgsize");
  save_pretrained(dir, c, random_weights(c, 1), io::DType::f32, {});
  nlohmann::json hf = io::read_json_file(dir / "config.json");
  edit(hf);
  io::write_json_file(dir / "config.json", hf);
  try {
    load_pretrained(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const UserError& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(ModelIo, AbsurdSizesAreCheckedAgainstTheTensorHeadersBeforeAllocating) {
  expect_config_error([](auto& hf) { hf["num_hidden_layers"] = 1000000000; },
                      {"config.json", "2^38", "n_layers 1000000000"});
  // Under the parameter cap, so only the tensor headers can tell.
  expect_config_error([](auto& hf) { hf["num_hidden_layers"] = 1000; },
                      {"config.json", "num_hidden_layers 1000", "holds 2 layers"});
  expect_config_error([](auto& hf) { hf["vocab_size"] = 1000000000000; }, {"config.json", "'vocab_size'", "2^38"});
  expect_config_error([](auto& hf) { hf["vocab_size"] = 21; },
                      {"config.json", "vocab_size 21", "model.embed_tokens.weight", "[20, 16]"});
  expect_config_error([](auto& hf) { hf["num_attention_heads"] = 0; }, {"config.json", "'num_attention_heads'"});
}

TEST(ModelIo, NonFiniteWeightsAreRefusedNamingTheTensor) {
  expect_load_error(
      [](auto& ts) {
        for (auto& t : ts)
          if (t.name == "model.layers.0.mlp.up_proj.weight") reinterpret_cast<float*>(t.bytes.data())[7] = NAN;
      },
      "tensor 'model.layers.0.mlp.up_proj.weight' holds NaN or infinite values");
}

TEST(ModelIo, ShardedAndSingleFileHoldTheSameWeights) {
  ModelConfig c = model_shape(40, 32, 3, 4, 2, 48);
  c.family = Family::qwen2;
  c.qkv_bias = true;
  const torch::Tensor flat = random_weights(c, 3);
  const fs::path one = temp_dir("one"), many = temp_dir("many");
  save_pretrained(one, c, flat, io::DType::f32, {1, 2, -1});
  save_pretrained(many, c, flat, io::DType::f32, {1, 2, -1}, 8 * 1024);
  EXPECT_TRUE(fs::exists(one / "model.safetensors"));
  EXPECT_FALSE(fs::exists(many / "model.safetensors"));
  const nlohmann::json index = io::read_json_file(many / "model.safetensors.index.json");
  EXPECT_GT(index["weight_map"].size(), 0u);
  const std::string shard = index["weight_map"]["model.embed_tokens.weight"].get<std::string>();
  EXPECT_NE(shard.find("-of-"), std::string::npos) << shard;
  EXPECT_TRUE(fs::exists(many / shard)) << index.dump();
  EXPECT_TRUE(torch::equal(load_pretrained(one).flat, flat));
  EXPECT_TRUE(torch::equal(load_pretrained(many).flat, flat));
  // Writing single-file weights over sharded ones leaves no stale shard behind.
  save_pretrained(many, c, flat, io::DType::f32, {1, 2, -1});
  EXPECT_FALSE(fs::exists(many / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(many / shard));
  // An index naming a missing shard is named.
  save_pretrained(many, c, flat, io::DType::f32, {1, 2, -1}, 8 * 1024);
  fs::remove(many / shard);
  try {
    load_pretrained(many);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(shard), std::string::npos) << e.what();
  }
  fs::remove_all(one);
  fs::remove_all(many);
}

// The kernel's transparent huge pages backing the mapping that holds `p`, in KiB (smaps'
// AnonHugePages of that mapping); -1 when /proc/self/smaps has no mapping holding it.
int64_t huge_page_kib(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    const std::size_t dash = line.find('-');
    if (dash != std::string::npos && dash < 17 && line.find(' ') > dash) {  // a mapping's header line
      const std::uintptr_t lo = std::stoull(line.substr(0, dash), nullptr, 16);
      const std::uintptr_t hi = std::stoull(line.substr(dash + 1, line.find(' ') - dash - 1), nullptr, 16);
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream in(line.substr(14));
      int64_t kib = 0;
      in >> kib;
      return kib;
    }
  }
  return -1;
}

std::string transparent_huge_pages() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line;
}

TEST(LazyZeros, ZeroAlignedAndWritableAtEverySize) {
  // Below the huge-page threshold (calloc), at it (8 MiB) and past it with an odd count.
  for (const int64_t n : {int64_t(1), int64_t(1000), int64_t(2) << 20, (int64_t(3) << 20) + 7}) {
    for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
      torch::Tensor t = lazy_zeros(n, dtype);
      ASSERT_EQ(t.numel(), n);
      ASSERT_EQ(t.scalar_type(), dtype);
      const auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr());
      EXPECT_EQ(address % 64, 0u) << n;
      if (n * int64_t(t.element_size()) >= (int64_t(8) << 20)) EXPECT_EQ(address % (2u << 20), 0u) << n;
      EXPECT_TRUE(t.eq(0).all().item<bool>()) << n;
      t.fill_(1);
      EXPECT_EQ(t.to(torch::kFloat64).sum().item<double>(), double(n)) << n;
    }
  }
}

TEST(LazyZeros, LargeBuffersAreBackedByHugePagesWhereTheKernelAllowsThem) {
  const std::string setting = transparent_huge_pages();
  if (setting.find("[always]") == std::string::npos && setting.find("[madvise]") == std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off here (" << setting << ")";
  torch::Tensor t = lazy_zeros(int64_t(16) << 20, torch::kFloat32);  // 64 MiB
  t.fill_(1);                                                        // the first touch
  // The kernel may fall back to small pages where it cannot find free 2 MiB frames; most of a fresh
  // 64 MiB buffer gets huge ones on an idle machine.
  EXPECT_GE(huge_page_kib(t.data_ptr()), 32 * 1024) << "setting: " << setting;
}

}  // namespace
}  // namespace unstuck::model
