// `unstuck inspect` on the config.json of real models (public numbers of Qwen2.5-1.5B, Llama-3.2-1B
// and Qwen3-0.6B, no weights): the family, the parameter count their model cards state, and that the
// layout is accepted; an unsupported family is reported with the reason and exit status 1.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

struct Result {
  int status = -1;
  std::string output;
};

Result inspect(const std::string& name, const std::string& config_json) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_inspect_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json;
  Result r;
  FILE* pipe = ::popen((std::string(UNSTUCK_BINARY) + " inspect " + dir.string() + " 2>&1").c_str(), "r");
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), int(buf.size()), pipe)) r.output += buf.data();
  r.status = WEXITSTATUS(::pclose(pipe));
  fs::remove_all(dir);
  return r;
}

bool has(const Result& r, const std::string& line) { return r.output.find(line) != std::string::npos; }

TEST(Inspect, Qwen25_1_5B) {
  const Result r = inspect("qwen25", R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 1536, "initializer_range": 0.02,
    "intermediate_size": 8960, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 12, "num_hidden_layers": 28, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "family: qwen2\n")) << r.output;
  EXPECT_TRUE(has(r, "parameters: 1543714304\n")) << r.output;  // the model card's 1.54B
  EXPECT_TRUE(has(r, "dtype: bfloat16\n")) << r.output;
  EXPECT_TRUE(has(r, "vocab: 151936\n")) << r.output;
  EXPECT_TRUE(has(r, "context length: 131072\n")) << r.output;
  EXPECT_TRUE(has(r, "q/k/v bias: yes")) << r.output;
  EXPECT_TRUE(has(r, "supported: yes\n")) << r.output;
}

TEST(Inspect, Llama32_1B) {
  const Result r = inspect("llama32", R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "family: llama\n")) << r.output;
  EXPECT_TRUE(has(r, "parameters: 1235814400\n")) << r.output;  // the model card's 1.24B
  EXPECT_TRUE(has(r, "rope: theta 500000, llama3 scaling x32 from 8192 positions\n")) << r.output;
  EXPECT_TRUE(has(r, "supported: yes\n")) << r.output;
}

TEST(Inspect, Qwen3_0_6B) {
  const Result r = inspect("qwen3", R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
    "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "family: qwen3\n")) << r.output;
  // 0.44B without the embedding, as the model card says, plus 151936 x 1024 embedding rows.
  EXPECT_TRUE(has(r, "parameters: 596049920\n")) << r.output;
  EXPECT_TRUE(has(r, "q/k norm: yes")) << r.output;
  EXPECT_TRUE(has(r, "supported: yes\n")) << r.output;
}

TEST(Inspect, UnsupportedFamilyIsExplained) {
  const Result r = inspect("gemma", R"({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
    "hidden_size": 2304, "vocab_size": 256000})");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r, "supported: no\n")) << r.output;
  EXPECT_TRUE(has(r, "model_type 'gemma2' (architectures Gemma2ForCausalLM) is not supported")) << r.output;
}

}  // namespace
