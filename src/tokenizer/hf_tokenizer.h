// A Hugging Face tokenizer.json file: added tokens, normalizer, pre-tokenizer, BPE model,
// post-processor and decoder, run in the order and with the semantics of the `tokenizers` library.
// Supported components: docs/TOKENIZER.md; anything else is refused by type and JSON path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/hf_components.h"

namespace unstuck::tokenizer {

class HfTokenizer {
 public:
  // `json_text`: the file's contents; `source` names it in errors.
  HfTokenizer(const std::string& json_text, const std::string& source);

  // Ids of `text` (valid UTF-8, else UserError naming the byte offset). With `add_special_tokens`
  // the post-processor's template adds its tokens (e.g. BOS), as tokenizers' encode() does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Text of `ids`; `skip_special_tokens` drops added tokens marked special.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  int32_t vocab_size() const { return vocab_size_; }  // highest id + 1
  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  const std::string* id_to_token(int32_t id) const;   // nullptr when absent
  int32_t unk_id() const { return model_->unk_id(); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  // Ids the post-processor puts before / after the sequence ({bos} / {} for Llama).
  const std::vector<int32_t>& template_prefix() const { return prefix_; }
  const std::vector<int32_t>& template_suffix() const { return suffix_; }
  const std::string& json_text() const { return json_text_; }

 private:
  void parse_post_processor(const nlohmann::json& j, const std::string& where);

  std::string json_text_;
  std::string source_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  AddedTokenMatcher raw_matcher_;         // tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // tokens with normalized = true
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<int32_t> prefix_, suffix_;
  int32_t vocab_size_ = 0;
};

}  // namespace unstuck::tokenizer
