// tokenizer.json loading and the encode/decode pipeline (see hf_tokenizer.h).
#include "tokenizer/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/unicode_text.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer {

using nlohmann::json;

HfTokenizer::HfTokenizer(const std::string& json_text, const std::string& source)
    : json_text_(json_text), source_(source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw UserError(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!root.is_object()) throw UserError(source + ": expected a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    if (root.contains(key) && !root[key].is_null()) {
      throw UserError(source + ": '" + key + "' is set; truncation and padding inside tokenizer.json " +
                      "are not supported (set it to null)");
    }
  }
  const json& model = root.value("model", json());
  const std::string model_type = model.is_object() ? model.value("type", std::string("BPE")) : "";
  if (model_type != "BPE") {
    throw UserError(source + ": model.type '" + model_type + "' is not supported (only BPE)");
  }
  try {
    model_ = std::make_unique<BpeModel>(model, source + ": model");
    normalizer_ = make_normalizer(root.value("normalizer", json()), source + ": normalizer");
    pre_tokenizer_ = make_pre_tokenizer(root.value("pre_tokenizer", json()), source + ": pre_tokenizer");
    decoder_ = make_decoder(root.value("decoder", json()), source + ": decoder");
    parse_post_processor(root.value("post_processor", json()), source + ": post_processor");
  } catch (const json::exception& e) {
    throw UserError(source + ": unexpected JSON structure (" + e.what() + ")");
  }
  vocab_size_ = model_->max_id() + 1;
  const json& added = root.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    AddedToken token;
    token.id = t.at("id").get<int32_t>();
    token.content = t.at("content").get<std::string>();
    token.single_word = t.value("single_word", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", false);
    token.special = t.value("special", false);
    vocab_size_ = std::max(vocab_size_, token.id + 1);
    added_by_id_[token.id] = added_.size();
    added_by_content_[token.content] = token.id;
    if (token.normalized) {
      // `tokenizers` matches these in the normalized text, so their pattern is normalized too.
      std::string pattern = token.content;
      if (normalizer_) normalizer_->normalize(pattern);
      normalized_matcher_.add(token, pattern);
    } else {
      raw_matcher_.add(token, token.content);
    }
    added_.push_back(std::move(token));
  }
}

void HfTokenizer::parse_post_processor(const json& j, const std::string& where) {
  if (j.is_null()) return;
  const std::string type = j.value("type", std::string());
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    const json& parts = j.at("processors");
    for (size_t i = 0; i < parts.size(); ++i) {
      parse_post_processor(parts[i], where + ".processors[" + std::to_string(i) + "]");
    }
    return;
  }
  if (type != "TemplateProcessing") {
    throw UserError(where + ": post_processor type '" + type +
                    "' is not supported (docs/TOKENIZER.md lists the supported components)");
  }
  const json& specials = j.value("special_tokens", json::object());
  bool seen_sequence = false;
  for (const json& item : j.at("single")) {
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", std::string("A")) != "A") {
        throw UserError(where + ".single: a single-sequence template may only use sequence A");
      }
      seen_sequence = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    if (!specials.contains(name)) {
      throw UserError(where + ".special_tokens: no entry for '" + name + "' used in the template");
    }
    for (const json& id : specials[name].at("ids")) {
      (seen_sequence ? suffix_ : prefix_).push_back(id.get<int32_t>());
    }
  }
}

int32_t HfTokenizer::token_to_id(std::string_view token) const {
  const auto it = added_by_content_.find(std::string(token));
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

const std::string* HfTokenizer::id_to_token(int32_t id) const {
  const auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return &added_[it->second].content;
  return model_->id_to_token(id);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t bad = unicode::invalid_utf8_offset(text);
  if (bad != std::string_view::npos) {
    throw UserError("text to encode with " + source_ + " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_;
  // 1. Added tokens matched in the raw text; 2. the rest normalized, then searched for the
  // added tokens that match normalized text; 3. what remains is pre-tokenized and run through BPE.
  std::vector<Segment> raw;
  raw_matcher_.split(text, true, raw);
  std::vector<Segment> segments;
  for (Segment& s : raw) {
    if (s.id >= 0) {
      segments.push_back(std::move(s));
      continue;
    }
    if (normalizer_) normalizer_->normalize(s.text);
    normalized_matcher_.split(s.text, s.at_start, segments);
  }
  std::vector<PreToken> words;
  for (Segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    words.clear();
    words.push_back({std::move(s.text), s.at_start});
    if (pre_tokenizer_) pre_tokenizer_->split(words);
    for (const PreToken& w : words) model_->tokenize(w.text, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const auto added = added_by_id_.find(id);
    if (added != added_by_id_.end() && skip_special_tokens && added_[added->second].special) continue;
    const std::string* token = id_to_token(id);
    if (token == nullptr) {
      throw UserError("token id " + std::to_string(id) + " is not in the vocabulary of " + source_ +
                      "; do the model and the tokenizer belong together?");
    }
    tokens.push_back(*token);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace unstuck::tokenizer
