// SentencePiece -> tokenizer.json conversion as transformers' LlamaTokenizer does it (see
// sp_to_hf.h). Merges follow transformers' generate_merges(vocab): every way to split a piece
// into two pieces of the vocabulary, ordered by the merged piece's id, then by the length of the
// left part (in characters); the rank is the position in that order.
#include "tokenizer/sp_to_hf.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "tokenizer/sp_model_proto.h"
#include "tokenizer/unicode_text.h"

namespace unstuck::tokenizer {
namespace {

using nlohmann::json;

json added_token(int32_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

json generate_merges(const std::vector<std::string>& pieces, const std::unordered_map<std::string, int32_t>& vocab) {
  // (merged id, left length, right length, left, right)
  std::vector<std::tuple<int32_t, size_t, size_t, std::string, std::string>> merges;
  for (int32_t id = 0; id < static_cast<int32_t>(pieces.size()); ++id) {
    const std::string& piece = pieces[id];
    if (vocab.at(piece) != id) continue;  // a duplicate piece: Python's dict keeps the last id
    size_t chars_left = 0;
    size_t total_chars = 0;
    for (size_t p = 0; p < piece.size(); p += unicode::char_length(static_cast<unsigned char>(piece[p]))) ++total_chars;
    for (size_t pos = 0; pos < piece.size();) {
      pos += unicode::char_length(static_cast<unsigned char>(piece[pos]));
      ++chars_left;
      if (pos >= piece.size()) break;
      const std::string left = piece.substr(0, pos), right = piece.substr(pos);
      if (vocab.count(left) && vocab.count(right)) {
        merges.emplace_back(id, chars_left, total_chars - chars_left, left, right);
      }
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a), std::get<2>(a)) <
           std::tie(std::get<0>(b), std::get<1>(b), std::get<2>(b));
  });
  json out = json::array();
  for (const auto& m : merges) out.push_back(json::array({std::get<3>(m), std::get<4>(m)}));
  return out;
}

}  // namespace

std::string config_token_name(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content")) return j["content"].get<std::string>();
  return "";
}

bool names_llama_tokenizer(const json& config) {
  const std::string cls = config.value("tokenizer_class", std::string());
  return cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast";
}

std::string llama_tokenizer_json(const sentencepiece::SentencePieceProcessor& sp, const json& config) {
  const SpModelInfo info = read_sp_model_info(sp.serialized_model_proto());
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int32_t> vocab_map;
  json vocab = json::object();
  for (int32_t id = 0; id < sp.GetPieceSize(); ++id) {
    pieces.push_back(sp.IdToPiece(id));
    vocab_map[pieces.back()] = id;
    vocab[pieces.back()] = id;
  }
  // Control and unknown pieces are special added tokens, user-defined ones plain added tokens;
  // tokenizer_config.json's added_tokens_decoder adds or overrides entries.
  std::map<int32_t, json> added;
  for (int32_t id = 0; id < static_cast<int32_t>(info.piece_types.size()); ++id) {
    const int type = info.piece_types[id];
    if (type == SpModelInfo::control || type == SpModelInfo::unknown || type == SpModelInfo::user_defined) {
      added[id] = added_token(id, pieces[id], type != SpModelInfo::user_defined);
    }
  }
  for (const auto& [key, t] : config.value("added_tokens_decoder", json::object()).items()) {
    json token = added_token(std::stoi(key), t.at("content").get<std::string>(), t.value("special", true));
    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) token[flag] = t.value(flag, false);
    added[std::stoi(key)] = token;
  }
  json added_list = json::array();
  for (auto& [id, token] : added) added_list.push_back(token);

  const bool add_prefix_space = config.value("add_prefix_space", true);
  const bool legacy = config.value("legacy", false);
  const std::string scheme = !add_prefix_space ? "never" : legacy ? "always" : "first";
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}});
  if (add_prefix_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});

  json single = json::array();
  json specials = json::object();
  const auto template_token = [&](const char* flag, const char* key, bool default_on) {
    if (!config.value(flag, default_on) || !config.contains(key)) return;
    const std::string name = config_token_name(config[key]);
    const auto it = vocab_map.find(name);
    if (it == vocab_map.end()) return;
    single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
    specials[name] = {{"id", name}, {"ids", {it->second}}, {"tokens", {name}}};
  };
  template_token("add_bos_token", "bos_token", false);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  template_token("add_eos_token", "eos_token", false);

  json doc = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added_list},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme}, {"split", false}}},
              {"post_processor", {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}}},
              {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", generate_merges(pieces, vocab_map)}}}};
  return doc.dump();
}

}  // namespace unstuck::tokenizer
