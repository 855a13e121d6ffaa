// config.json parsing for the supported families: every key is read with its type checked and its
// dotted name in errors; keys that would change the function and that we do not compute are refused.
#include "unstuck/model/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::model {
namespace {

using nlohmann::json;

struct FamilyInfo {
  Family family;
  const char* model_type;
  const char* architecture;
};
constexpr FamilyInfo kFamilies[] = {{Family::llama, "llama", "LlamaForCausalLM"},
                                    {Family::qwen2, "qwen2", "Qwen2ForCausalLM"},
                                    {Family::qwen3, "qwen3", "Qwen3ForCausalLM"},
                                    {Family::mistral, "mistral", "MistralForCausalLM"}};

const FamilyInfo& family_info(Family f) {
  for (const FamilyInfo& i : kFamilies)
    if (i.family == f) return i;
  return kFamilies[0];
}

// Keys that do not change the function we compute: metadata, generation defaults, training-only
// options of transformers' PretrainedConfig. Everything else must be understood or is refused.
const std::set<std::string> kHarmlessKeys = {"_name_or_path",
                                             "_commit_hash",
                                             "_attn_implementation",
                                             "_attn_implementation_autoset",
                                             "transformers_version",
                                             "torch_dtype",
                                             "dtype",
                                             "use_cache",
                                             "initializer_range",
                                             "pretraining_tp",
                                             "return_dict",
                                             "output_hidden_states",
                                             "output_attentions",
                                             "torchscript",
                                             "use_bfloat16",
                                             "tf_legacy_loss",
                                             "pruned_heads",
                                             "tie_encoder_decoder",
                                             "is_decoder",
                                             "is_encoder_decoder",
                                             "add_cross_attention",
                                             "cross_attention_hidden_size",
                                             "chunk_size_feed_forward",
                                             "finetuning_task",
                                             "id2label",
                                             "label2id",
                                             "tokenizer_class",
                                             "prefix",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "task_specific_params",
                                             "problem_type",
                                             "max_length",
                                             "min_length",
                                             "do_sample",
                                             "early_stopping",
                                             "num_beams",
                                             "num_beam_groups",
                                             "diversity_penalty",
                                             "temperature",
                                             "top_k",
                                             "top_p",
                                             "typical_p",
                                             "repetition_penalty",
                                             "length_penalty",
                                             "no_repeat_ngram_size",
                                             "encoder_no_repeat_ngram_size",
                                             "bad_words_ids",
                                             "num_return_sequences",
                                             "output_scores",
                                             "return_dict_in_generate",
                                             "forced_bos_token_id",
                                             "forced_eos_token_id",
                                             "remove_invalid_values",
                                             "exponential_decay_length_penalty",
                                             "suppress_tokens",
                                             "begin_suppress_tokens",
                                             "max_window_layers",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "pad_token_id",
                                             "architectures",
                                             "model_type",
                                             "auto_map"};

// Keys this parser interprets (checked below).
const std::set<std::string> kReadKeys = {
    "vocab_size",           "hidden_size",         "intermediate_size",  "num_hidden_layers",
    "num_attention_heads",  "num_key_value_heads", "head_dim",           "max_position_embeddings",
    "rms_norm_eps",         "rope_theta",          "rope_scaling",       "rope_parameters",
    "hidden_act",           "attention_bias",      "mlp_bias",           "tie_word_embeddings",
    "attention_dropout",    "sliding_window",      "use_sliding_window", "layer_types",
    "partial_rotary_factor"};

class Reader {
 public:
  Reader(const json& obj, std::string source, std::string prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw UserError(source_ + ": key '" + prefix_ + key + "' " + what);
  }
  bool has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const json& at(const std::string& key) const { return obj_.at(key); }

  int64_t integer(const std::string& key) const {
    if (!obj_.contains(key)) throw UserError(source_ + ": missing key '" + prefix_ + key + "'");
    return integer_value(key, obj_.at(key));
  }
  int64_t integer_value(const std::string& key, const json& v) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
        std::fabs(v.get<double>()) < 9e18)
      return int64_t(v.get<double>());
    fail(key, "must be an integer, got " + std::string(v.type_name()) + " " + v.dump());
  }
  int64_t integer_or(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  int64_t positive(const std::string& key) const {
    const int64_t v = integer(key);
    if (v <= 0) fail(key, "must be > 0, got " + std::to_string(v));
    if (v > kMaxParams) fail(key, "is " + std::to_string(v) + ", over 2^38: is it mistyped?");
    return v;
  }
  double number(const std::string& key) const {
    if (!obj_.contains(key)) throw UserError(source_ + ": missing key '" + prefix_ + key + "'");
    const json& v = obj_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail(key, "must be a finite number, got " + std::string(v.type_name()) + " " + v.dump());
    return v.get<double>();
  }
  double number_or(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }
  bool boolean_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!obj_.at(key).is_boolean()) fail(key, "must be true or false, got " + obj_.at(key).dump());
    return obj_.at(key).get<bool>();
  }
  std::string text_or(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!obj_.at(key).is_string()) fail(key, "must be a string, got " + obj_.at(key).dump());
    return obj_.at(key).get<std::string>();
  }
  // A token id: absent / null -> -1; an integer; or (`list_ok`) a list of integers.
  std::vector<int32_t> token_ids(const std::string& key, bool list_ok) const {
    if (!has(key)) return {};
    const json& v = obj_.at(key);
    std::vector<int32_t> out;
    const auto one = [&](const json& x) {
      const int64_t id = integer_value(key, x);
      if (id < 0 || id > INT32_MAX) fail(key, "must be a token id >= 0, got " + x.dump());
      out.push_back(int32_t(id));
    };
    if (v.is_array() && list_ok) {
      for (const json& x : v) one(x);
    } else if (v.is_array()) {
      fail(key, "must be one token id, got the list " + v.dump());
    } else {
      one(v);
    }
    return out;
  }

 private:
  const json& obj_;
  std::string source_, prefix_;
};

const FamilyInfo& parse_family(const json& hf, const std::string& source) {
  const Reader r(hf, source, "");
  const std::string type = r.text_or("model_type", "");
  const FamilyInfo* found = nullptr;
  for (const FamilyInfo& f : kFamilies)
    if (type == f.model_type) found = &f;
  std::string archs;
  if (r.has("architectures")) {
    if (!hf["architectures"].is_array()) r.fail("architectures", "must be a list of class names");
    for (const json& a : hf["architectures"]) {
      if (!a.is_string()) r.fail("architectures", "must be a list of class names, got " + hf["architectures"].dump());
      archs += (archs.empty() ? "" : ", ") + a.get<std::string>();
      if (found && a.get<std::string>() != found->architecture)
        r.fail("architectures", "lists '" + a.get<std::string>() + "', but model_type '" + type + "' is computed as " +
                                    found->architecture + " only");
    }
  }
  if (!found)
    throw UserError(source + ": model_type '" + type + "'" + (archs.empty() ? "" : " (architectures " + archs + ")") +
                    " is not supported; supported: " + supported_families_text());
  return *found;
}

void parse_rope(const json& hf, const std::string& source, ModelConfig& c) {
  const Reader top(hf, source, "");
  // transformers >= 5 writes rope_parameters {rope_type, rope_theta, ...}; older versions
  // rope_theta at the top level and rope_scaling {type | rope_type, factor, ...} or null.
  const char* key = top.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  c.rope_theta = top.number_or("rope_theta", c.rope_theta);
  if (top.has("partial_rotary_factor") && top.number("partial_rotary_factor") != 1.0)
    top.fail("partial_rotary_factor", "is not supported (only full-width rotary embeddings)");
  if (!top.has(key)) return;
  const json& rope = hf.at(key);
  if (!rope.is_object()) top.fail(key, "must be an object, got " + rope.dump());
  const Reader r(rope, source, std::string(key) + ".");
  static const std::set<std::string> known = {"rope_type",
                                              "type",
                                              "rope_theta",
                                              "factor",
                                              "low_freq_factor",
                                              "high_freq_factor",
                                              "original_max_position_embeddings",
                                              "beta_fast",
                                              "beta_slow",
                                              "attention_factor",
                                              "truncate",
                                              "partial_rotary_factor"};
  for (const auto& [k, v] : rope.items())
    if (!known.count(k) && !v.is_null())
      r.fail(k, "is not supported (it changes RoPE in a way unstuck does not compute)");
  c.rope_theta = r.number_or("rope_theta", c.rope_theta);
  if (c.rope_theta <= 0) r.fail("rope_theta", "must be > 0");
  if (r.has("partial_rotary_factor") && r.number("partial_rotary_factor") != 1.0)
    r.fail("partial_rotary_factor", "is not supported (only full-width rotary embeddings)");
  const std::string type = r.text_or("rope_type", r.text_or("type", "default"));
  RopeScaling& s = c.rope_scaling;
  bool found = false;
  for (const auto& [t, name] : kRopeTypeNames)
    if (type == name) s.type = t, found = true;
  if (!found)
    r.fail("rope_type",
           "'" + type + "' is not supported; supported: default, linear, llama3, yarn" +
               (type == "dynamic" ? " (dynamic NTK changes the frequencies with the sequence length)" : ""));
  if (s.type == RopeType::none) return;
  s.factor = r.number("factor");
  if (s.factor < 1) r.fail("factor", "must be >= 1, got " + std::to_string(s.factor));
  if (s.type == RopeType::llama3) {
    s.low_freq_factor = r.number("low_freq_factor");
    s.high_freq_factor = r.number("high_freq_factor");
    s.original_max_len = r.integer("original_max_position_embeddings");
    if (!(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor))
      r.fail("high_freq_factor", "must exceed low_freq_factor > 0");
  }
  if (s.type == RopeType::yarn) {
    s.original_max_len = r.integer("original_max_position_embeddings");
    s.beta_fast = r.number_or("beta_fast", 32.0);
    s.beta_slow = r.number_or("beta_slow", 1.0);
    s.attention_factor = r.number_or("attention_factor", 0.0);
    if (!r.boolean_or("truncate", true)) r.fail("truncate", "false is not supported");
  }
  if (s.original_max_len <= 0) r.fail("original_max_position_embeddings", "must be > 0");
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Layer index of "model.layers.{i}.…", or -1.
int64_t layer_index(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return -1;
  int64_t i = 0;
  for (std::size_t k = prefix.size(); k < dot; ++k) {
    if (!std::isdigit(static_cast<unsigned char>(name[k])) || i > (int64_t(1) << 40)) return -1;
    i = i * 10 + (name[k] - '0');
  }
  return i;
}

// Sizes in config.json against the checkpoint's headers, before the layout is built (a mistyped
// num_hidden_layers of 1e9 would otherwise build a billion-entry table).
void check_header_sizes(const ModelConfig& c, const io::SafetensorsDir& w, const std::string& config_file) {
  const io::TensorView* embed = w.find("model.embed_tokens.weight");
  if (!embed) throw UserError(w.source() + ": missing tensor 'model.embed_tokens.weight'");
  if (embed->shape != std::vector<int64_t>{c.vocab_size, c.dim})
    throw UserError(config_file + ": vocab_size " + std::to_string(c.vocab_size) + " and hidden_size " +
                    std::to_string(c.dim) + " disagree with tensor 'model.embed_tokens.weight' of shape " +
                    shape_text(embed->shape) + " in " + w.file_of("model.embed_tokens.weight"));
  int64_t layers = 0;
  for (const std::string& name : w.names()) layers = std::max(layers, layer_index(name) + 1);
  if (layers != c.n_layers)
    throw UserError(config_file + ": num_hidden_layers " + std::to_string(c.n_layers) + " disagrees with " +
                    w.source() + ", which holds " + std::to_string(layers) + " layers");
}

}  // namespace

std::string supported_families_text() {
  std::string out;
  for (const FamilyInfo& f : kFamilies)
    out += std::string(out.empty() ? "" : ", ") + f.model_type + " (" + f.architecture + ")";
  return out;
}

HfConfig parse_hf_config(const json& hf, const std::string& source) {
  if (!hf.is_object()) throw UserError(source + ": expected a JSON object");
  const FamilyInfo& fam = parse_family(hf, source);
  const Reader r(hf, source, "");
  for (const auto& [k, v] : hf.items())
    if (!kHarmlessKeys.count(k) && !kReadKeys.count(k))
      r.fail(k, "is not understood by unstuck for model_type '" + std::string(fam.model_type) +
                    "'; refusing rather than computing a different function");
  HfConfig out;
  ModelConfig& c = out.model;
  c.family = fam.family;
  c.vocab_size = r.positive("vocab_size");
  c.dim = r.positive("hidden_size");
  c.n_layers = r.positive("num_hidden_layers");
  c.n_heads = r.positive("num_attention_heads");
  c.n_kv_heads = r.has("num_key_value_heads") ? r.positive("num_key_value_heads") : c.n_heads;
  if (c.n_heads % c.n_kv_heads != 0)
    r.fail("num_key_value_heads", "(" + std::to_string(c.n_kv_heads) + ") must divide num_attention_heads (" +
                                      std::to_string(c.n_heads) + ")");
  c.ffn_dim = r.positive("intermediate_size");
  c.max_seq_len = r.positive("max_position_embeddings");
  if (c.max_seq_len > kMaxSeqLen)
    r.fail("max_position_embeddings", "must be <= " + std::to_string(kMaxSeqLen) +
                                          " (2^24 tokens; it sets model.max_seq_len), got " +
                                          std::to_string(c.max_seq_len));
  c.norm_eps = r.number("rms_norm_eps");
  if (c.norm_eps <= 0) r.fail("rms_norm_eps", "must be > 0");
  // head_dim: Qwen3's class default is 128; the others derive hidden_size / num_attention_heads.
  if (r.has("head_dim")) {
    c.head_size = r.positive("head_dim");
  } else if (fam.family == Family::qwen3) {
    c.head_size = 128;
  } else if (c.dim % c.n_heads != 0) {
    r.fail("num_attention_heads", "(" + std::to_string(c.n_heads) + ") must divide hidden_size (" +
                                      std::to_string(c.dim) + ") when head_dim is absent");
  }
  if (c.head_dim() % 2 != 0)
    r.fail("head_dim", "must be even for rotary embeddings, got " + std::to_string(c.head_dim()));
  parse_rope(hf, source, c);
  c.tie_embeddings = r.boolean_or("tie_word_embeddings", false);

  const std::string act = r.text_or("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", "'" + act + "' is not supported (only silu, the SwiGLU MLP)");
  if (r.number_or("attention_dropout", 0.0) != 0.0) r.fail("attention_dropout", "must be 0 (unstuck has no dropout)");
  if (r.boolean_or("mlp_bias", false)) r.fail("mlp_bias", "true is not supported");
  const bool attention_bias = r.boolean_or("attention_bias", false);
  switch (fam.family) {
    case Family::llama:
    case Family::qwen3:  // attention_bias puts biases on q, k, v and o
      c.qkv_bias = c.o_bias = attention_bias;
      break;
    case Family::qwen2:  // q, k, v always have biases, o never
      if (r.has("attention_bias")) r.fail("attention_bias", "is not a Qwen2 key (Qwen2 always has q/k/v biases)");
      c.qkv_bias = true;
      break;
    case Family::mistral:
      if (attention_bias) r.fail("attention_bias", "true is not a Mistral feature");
      break;
  }
  c.qk_norm = fam.family == Family::qwen3;

  // Sliding windows: Mistral's applies to every layer; Qwen's per-layer variant is refused.
  if (fam.family == Family::mistral) {
    c.sliding_window = r.integer_or("sliding_window", 0);
    if (c.sliding_window < 0) r.fail("sliding_window", "must be > 0 or null");
  } else {
    if (r.boolean_or("use_sliding_window", false)) r.fail("use_sliding_window", "true is not supported");
    if (fam.family == Family::llama && r.has("sliding_window")) r.fail("sliding_window", "is not a Llama key");
  }
  if (r.has("layer_types")) {
    if (!hf["layer_types"].is_array()) r.fail("layer_types", "must be a list");
    for (const json& t : hf["layer_types"])
      if (!(t.is_string() && t.get<std::string>() == "full_attention"))
        r.fail("layer_types", "has " + t.dump() + "; only full_attention layers are supported");
  }

  const std::vector<int32_t> bos = r.token_ids("bos_token_id", false), pad = r.token_ids("pad_token_id", false);
  out.tokens.eos_ids = r.token_ids("eos_token_id", true);
  out.tokens.bos = bos.empty() ? -1 : bos[0];
  out.tokens.pad = pad.empty() ? -1 : pad[0];
  out.tokens.eos = out.tokens.eos_ids.empty() ? -1 : out.tokens.eos_ids[0];
  out.dtype = r.text_or("dtype", r.text_or("torch_dtype", ""));

  c.init_std = r.number_or("initializer_range", c.init_std);
  if (c.init_std <= 0) c.init_std = ModelConfig{}.init_std;
  try {
    validate_model_config(c);
  } catch (const UserError& e) {
    throw UserError(source + ": " + e.what());
  }
  return out;
}

void check_weights_match(const ModelConfig& c, const io::SafetensorsDir& weights, const std::string& config_file) {
  check_header_sizes(c, weights, config_file);
  const ParamLayout layout = llama_layout(c);
  std::set<std::string> used;
  for (const ParamEntry& e : layout.entries) {
    const io::TensorView* t = weights.find(e.name);
    if (!t) throw UserError(weights.source() + ": missing tensor '" + e.name + "'");
    if (t->shape != e.shape)
      throw UserError(weights.file_of(e.name) + ": tensor '" + e.name + "' has shape " + shape_text(t->shape) +
                      ", expected " + shape_text(e.shape));
    used.insert(e.name);
  }
  for (const std::string& name : weights.names()) {
    // A tied checkpoint may still carry the (identical) output head; old Llama checkpoints carry
    // the derived rotary tables. Anything else is a mismatch.
    const std::string derived = "rotary_emb.inv_freq";
    const bool is_derived =
        name.size() > derived.size() && name.compare(name.size() - derived.size(), derived.size(), derived) == 0;
    if (used.count(name) || is_derived || (c.tie_embeddings && name == "lm_head.weight")) continue;
    throw UserError(weights.file_of(name) + ": unexpected tensor '" + name + "' (not part of a " +
                    family_info(c.family).model_type + " model with this config.json)");
  }
}

HfConfig read_hf_config(const std::filesystem::path& config_json) {
  return parse_hf_config(io::read_json_file(config_json), config_json.string());
}

std::vector<int32_t> read_generation_eos_ids(const std::filesystem::path& generation_config_json) {
  const json gen = io::read_json_file(generation_config_json);
  if (!gen.is_object()) throw UserError(generation_config_json.string() + ": expected a JSON object");
  return Reader(gen, generation_config_json.string(), "").token_ids("eos_token_id", true);
}

json hf_config_json(const ModelConfig& c, const SpecialTokens& t, const std::string& dtype) {
  const FamilyInfo& fam = family_info(c.family);
  json rope = {{"rope_type", enum_names(RopeType{})[std::size_t(c.rope_scaling.type)].second},
               {"rope_theta", c.rope_theta}};
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeType::none) rope["factor"] = s.factor;
  if (s.type == RopeType::llama3) {
    rope["low_freq_factor"] = s.low_freq_factor;
    rope["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == RopeType::llama3 || s.type == RopeType::yarn)
    rope["original_max_position_embeddings"] = s.original_max_len;
  if (s.type == RopeType::yarn) {
    rope["beta_fast"] = s.beta_fast;
    rope["beta_slow"] = s.beta_slow;
    if (s.attention_factor > 0) rope["attention_factor"] = s.attention_factor;
  }
  json hf = {
      {"architectures", {fam.architecture}},
      {"model_type", fam.model_type},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.dim},
      {"intermediate_size", c.ffn_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"head_dim", c.head_dim()},
      {"max_position_embeddings", c.max_seq_len},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_parameters", rope},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", c.tie_embeddings},
      {"initializer_range", c.init_std},
  };
  if (c.family == Family::llama || c.family == Family::qwen3) hf["attention_bias"] = c.qkv_bias;
  if (c.family == Family::llama) hf["mlp_bias"] = false;
  if (c.family == Family::mistral) hf["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  if (!dtype.empty()) hf["dtype"] = dtype;
  if (t.bos >= 0) hf["bos_token_id"] = t.bos;
  if (t.eos_ids.size() > 1)
    hf["eos_token_id"] = t.eos_ids;
  else if (t.eos >= 0)
    hf["eos_token_id"] = t.eos;
  if (t.pad >= 0) hf["pad_token_id"] = t.pad;
  return hf;
}

}  // namespace unstuck::model
