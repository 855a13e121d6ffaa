// config.json parsing: what transformers 4 and 5 write (null pad, list EOS, dtype / torch_dtype,
// rope_parameters / rope_scaling) is read; every feature we do not compute, and every malformed or
// absurd value, is refused with the file and the dotted key named (never a crash or a default).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::model {
namespace {

using nlohmann::json;

json llama() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 100, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_bias": false,
    "mlp_bias": false, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
    "pad_token_id": null, "transformers_version": "5.24.0", "dtype": "bfloat16", "use_cache": true,
    "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})");
}

// Expects parse_hf_config(hf) to throw a UserError containing every needle.
void expect_refused(const json& hf, const std::vector<std::string>& needles) {
  try {
    parse_hf_config(hf, "dir/config.json");
    ADD_FAILURE() << "accepted: " << hf.dump();
  } catch (const UserError& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos) << e.what();
  }
}

TEST(HfConfig, ReadsWhatTransformersWrites) {
  const HfConfig c = parse_hf_config(llama(), "config.json");
  EXPECT_EQ(c.model.family, Family::llama);
  EXPECT_EQ(c.model.n_kv_heads, 2);
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_EQ(c.tokens.pad, -1);
  EXPECT_EQ(c.tokens.eos, 2);
  EXPECT_EQ(c.dtype, "bfloat16");
  json old = llama();  // transformers 4: rope_theta at the top, rope_scaling, torch_dtype, list EOS
  old.erase("rope_parameters");
  old.erase("dtype");
  old["torch_dtype"] = "float16";
  old["rope_theta"] = 10000.0;
  old["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  old["eos_token_id"] = {128001, 128008, 128009};
  old["vocab_size"] = 128256;
  const HfConfig o = parse_hf_config(old, "config.json");
  EXPECT_EQ(o.model.rope_theta, 10000.0);
  EXPECT_EQ(o.model.rope_scaling.type, RopeType::linear);
  EXPECT_EQ(o.model.rope_scaling.factor, 2.0);
  EXPECT_EQ(o.tokens.eos, 128001);
  EXPECT_EQ(o.tokens.eos_ids.size(), 3u);
  EXPECT_EQ(o.dtype, "float16");
  // Round trip through what we write.
  const HfConfig back = parse_hf_config(hf_config_json(o.model, o.tokens, "float32"), "ours");
  EXPECT_EQ(back.model.rope_scaling.type, RopeType::linear);
  EXPECT_EQ(back.tokens.eos_ids, o.tokens.eos_ids);
}

TEST(HfConfig, UnsupportedFamiliesAndFeaturesAreRefusedByName) {
  json gemma = llama();
  gemma["model_type"] = "gemma";
  gemma["architectures"] = {"GemmaForCausalLM"};
  expect_refused(gemma, {"model_type 'gemma'", "GemmaForCausalLM", "supported: llama (LlamaForCausalLM), qwen2"});
  json mixed = llama();
  mixed["architectures"] = {"MixtralForCausalLM"};
  expect_refused(mixed, {"architectures", "MixtralForCausalLM"});
  json act = llama();
  act["hidden_act"] = "gelu_pytorch_tanh";
  expect_refused(act, {"'hidden_act'", "gelu_pytorch_tanh"});
  json mlp = llama();
  mlp["mlp_bias"] = true;
  expect_refused(mlp, {"'mlp_bias'"});
  json dynamic = llama();
  dynamic["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}, {"rope_theta", 1e4}};
  expect_refused(dynamic, {"'rope_parameters.rope_type'", "dynamic"});
  json quant = llama();
  quant["quantization_config"] = {{"quant_method", "gptq"}};
  expect_refused(quant, {"'quantization_config'"});
  json qwen_window = llama();
  qwen_window["model_type"] = "qwen2";
  qwen_window.erase("architectures");
  qwen_window.erase("attention_bias");
  qwen_window.erase("mlp_bias");
  qwen_window["use_sliding_window"] = true;
  expect_refused(qwen_window, {"'use_sliding_window'"});
  json layers = llama();
  layers["layer_types"] = {"full_attention", "sliding_attention"};
  expect_refused(layers, {"'layer_types'", "sliding_attention"});
  json partial = llama();
  partial["partial_rotary_factor"] = 0.5;
  expect_refused(partial, {"'partial_rotary_factor'"});
}

TEST(HfConfig, BadValuesNameTheKeyInsteadOfCrashing) {
  json heads = llama();
  heads["num_attention_heads"] = 0;  // used to divide by zero
  expect_refused(heads, {"'num_attention_heads'", "> 0"});
  json kv = llama();
  kv["num_key_value_heads"] = 3;
  expect_refused(kv, {"'num_key_value_heads'"});
  json vocab = llama();
  vocab["vocab_size"] = 1e12;
  expect_refused(vocab, {"'vocab_size'", "1000000000000", "2^38"});
  json layers = llama();
  layers["num_hidden_layers"] = 1000000000;
  layers["hidden_size"] = 4096;
  layers["num_attention_heads"] = 32;
  layers["num_key_value_heads"] = 8;
  expect_refused(layers, {"2^38", "n_layers 1000000000"});
  json type = llama();
  type["hidden_size"] = "wide";
  expect_refused(type, {"'hidden_size'", "must be an integer", "string"});
  json eos = llama();
  eos["eos_token_id"] = "</s>";
  expect_refused(eos, {"'eos_token_id'"});
  json pad = llama();
  pad["pad_token_id"] = {0, 1};
  expect_refused(pad, {"'pad_token_id'", "one token id"});
  json rope = llama();
  rope["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"rope_theta", 1e4}};
  expect_refused(rope, {"'rope_parameters.low_freq_factor'"});
  json missing = llama();
  missing.erase("intermediate_size");
  expect_refused(missing, {"missing key 'intermediate_size'"});
  json eps = llama();
  eps["rms_norm_eps"] = "small";
  expect_refused(eps, {"'rms_norm_eps'", "finite number"});
  // A context beyond 2^24 is named as config.json's key, not as model.max_seq_len (issue 31).
  json context = llama();
  context["max_position_embeddings"] = 1e9;
  expect_refused(context, {"'max_position_embeddings'", "<= 16777216", "1000000000"});
}

TEST(HfConfig, FamiliesSetTheirFeatures) {
  json q2 = llama();
  q2["model_type"] = "qwen2";
  q2["architectures"] = {"Qwen2ForCausalLM"};
  q2.erase("attention_bias");
  q2.erase("mlp_bias");
  const ModelConfig qwen2 = parse_hf_config(q2, "c").model;
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.o_bias);
  EXPECT_FALSE(qwen2.qk_norm);
  json q3 = llama();
  q3["model_type"] = "qwen3";
  q3["architectures"] = {"Qwen3ForCausalLM"};
  q3.erase("mlp_bias");
  const ModelConfig qwen3 = parse_hf_config(q3, "c").model;
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim(), 128);  // transformers' Qwen3Config default when head_dim is absent
  json m = llama();
  m["model_type"] = "mistral";
  m["architectures"] = {"MistralForCausalLM"};
  m.erase("attention_bias");
  m.erase("mlp_bias");
  m["sliding_window"] = 4096;
  EXPECT_EQ(parse_hf_config(m, "c").model.sliding_window, 4096);
  m["sliding_window"] = nullptr;
  EXPECT_EQ(parse_hf_config(m, "c").model.sliding_window, 0);
  // A feature set the family does not have cannot be exported as that family.
  ModelConfig odd = qwen2;
  odd.qk_norm = true;
  EXPECT_THROW(validate_model_config(odd), UserError);
}

}  // namespace
}  // namespace unstuck::model
