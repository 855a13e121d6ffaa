// BPE word tokenization (see bpe_model.h). The merge loop mirrors `tokenizers`' Word::merge_all: a
// min-heap of candidate merges keyed by (rank, position), stale entries skipped when popped.
#include "tokenizer/bpe_model.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <queue>

#include "tokenizer/unicode_text.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer {
namespace {

constexpr size_t kCacheCapacity = 200000;  // words; the cache is cleared when it grows past this
constexpr size_t kMaxCachedWordBytes = 256;

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// One symbol of a word being merged: a doubly linked list over positions.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool removed;
};

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& where) {
  for (const char* key : {"dropout"}) {
    if (model.contains(key) && !model[key].is_null()) {
      throw UserError(where + "." + key + ": BPE dropout is not supported (it makes encoding random)");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      throw UserError(where + "." + key + " = " + model[key].dump() + " is not supported");
    }
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    throw UserError(where + ".vocab: expected an object of token -> id");
  }
  for (const auto& [token, id] : model["vocab"].items()) {
    const auto i = id.get<int32_t>();
    vocab_[token] = i;
    vocab_r_[i] = token;
    max_id_ = std::max(max_id_, i);
  }
  const auto& merges = model.value("merges", nlohmann::json::array());
  int32_t rank = 0;
  for (const auto& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw UserError(where + ".merges[" + std::to_string(rank) + "]: expected \"left right\", got " + merge.dump());
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw UserError(where + ".merges[" + std::to_string(rank) + "]: expected a string or a pair, got " +
                      merge.dump());
    }
    const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      throw UserError(where + ".merges[" + std::to_string(rank) + "]: " + merge.dump() +
                      " uses a token that is not in the vocabulary");
    }
    merges_.emplace(pair_key(l->second, r->second), std::make_pair(rank, m->second));
    ++rank;
  }
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const auto unk = model["unk_token"].get<std::string>();
    const auto it = vocab_.find(unk);
    if (it == vocab_.end()) throw UserError(where + ".unk_token '" + unk + "' is not in the vocabulary");
    unk_id_ = it->second;
  }
  fuse_unk_ = model.value("fuse_unk", false);
  byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto it = vocab_.find(name);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  const auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    merge_word(word, out);
    return;
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();
  cache_.emplace(std::move(key), std::move(ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Initial symbols: one per character, or its bytes (byte fallback), or the unknown token
  // (consecutive unknowns fused into one when fuse_unk).
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool last_was_unk = false;
  const auto push = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, false});
  };
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = unicode::char_length(static_cast<unsigned char>(word[pos]));
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    const auto it = vocab_.find(std::string(ch));
    if (it != vocab_.end()) {
      push(it->second);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : ch) push(byte_ids_[static_cast<unsigned char>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // `tokenizers` drops characters it cannot map when there is no unk
    if (!(fuse_unk_ && last_was_unk)) push(unk_id_);
    last_was_unk = true;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto candidate = [&](int32_t left, int32_t right) {
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) candidate(i, i + 1);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.removed || cur.next < 0) continue;
    Symbol& right = symbols[cur.next];
    const auto it = merges_.find(pair_key(cur.id, right.id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    right.removed = true;
    cur.next = right.next;
    if (cur.next >= 0) symbols[cur.next].prev = top.pos;
    if (cur.prev >= 0) candidate(cur.prev, top.pos);
    if (cur.next >= 0) candidate(top.pos, cur.next);
  }
  for (const Symbol& s : symbols) {
    if (!s.removed) out.push_back(s.id);
  }
}

}  // namespace unstuck::tokenizer
