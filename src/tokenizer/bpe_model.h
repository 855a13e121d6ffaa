// The BPE model of a tokenizer.json file: vocabulary, ranked merges, optional unknown token and
// byte fallback, `ignore_merges`. Turns one pre-tokenized word into ids exactly as the `tokenizers`
// library does (lowest-rank merge first, leftmost on ties), in O(n log n) per word, with a cache.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace unstuck::tokenizer {

class BpeModel {
 public:
  // Reads the "model" object of tokenizer.json (`where` is its JSON path, for errors). Refuses what
  // it cannot reproduce (dropout, continuing_subword_prefix, end_of_word_suffix) by name.
  BpeModel(const nlohmann::json& model, const std::string& where);

  // Appends the ids of `word` (one pre-token) to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  const std::string* id_to_token(int32_t id) const;   // nullptr when absent
  int32_t unk_id() const { return unk_id_; }
  int32_t max_id() const { return max_id_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<int32_t, std::string> vocab_r_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  int32_t byte_ids_[256];  // byte fallback: id of "<0xXX>" or -1
  int32_t unk_id_ = -1;
  int32_t max_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace unstuck::tokenizer
