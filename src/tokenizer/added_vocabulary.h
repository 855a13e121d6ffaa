// Added and special tokens of a tokenizer.json file, matched in the text before normalization and
// BPE as `tokenizers`' AddedVocabulary does: leftmost-longest matches, with the single_word, lstrip,
// rstrip and normalized flags of each token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace unstuck::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // only where not preceded or followed by a word character
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = false;   // matched in the normalized text (else in the raw text)
  bool special = false;      // dropped by decode(skip_special_tokens)
};

// A run of text, or one matched added token (id >= 0).
struct Segment {
  std::string text;
  int32_t id;
  bool at_start;  // begins at offset 0 of the original input
};

// Leftmost-longest matcher over a set of added tokens (a byte trie; the texts are short).
class AddedTokenMatcher {
 public:
  void add(const AddedToken& token, std::string pattern);
  bool empty() const { return patterns_.empty(); }
  // Splits `text` into segments; matched tokens get their id.
  void split(std::string_view text, bool at_start, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::unordered_map<unsigned char, int32_t> next;
    int32_t pattern = -1;
  };
  size_t longest_at(std::string_view text, size_t pos, int32_t* pattern) const;

  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> patterns_;
  bool first_byte_[256] = {};
};

}  // namespace unstuck::tokenizer
