// Added-token matching (see added_vocabulary.h), after `tokenizers`' AddedVocabulary::find_matches.
#include "tokenizer/added_vocabulary.h"

#include "tokenizer/unicode_text.h"

namespace unstuck::tokenizer {
namespace {

// A regex word character (\w: letters, marks, decimal digits, connector punctuation, joiners),
// which is what `tokenizers` checks around single_word tokens: "²" is not one, U+0301 is.
bool is_word_char(char32_t cp) { return unicode::is_regex_word_char(cp); }

// The code point that ends text[0, end) (text is valid UTF-8).
char32_t last_char(std::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  size_t len = 0;
  return unicode::decode_at(text, pos, &len);
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token, std::string pattern) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (const char c : pattern) {
    const auto b = static_cast<unsigned char>(c);
    const auto it = nodes_[node].next.find(b);
    if (it == nodes_[node].next.end()) {
      nodes_.emplace_back();
      const auto child = static_cast<int32_t>(nodes_.size() - 1);
      nodes_[node].next[b] = child;
      node = child;
    } else {
      node = it->second;
    }
  }
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  if (nodes_[node].pattern < 0) {
    nodes_[node].pattern = static_cast<int32_t>(patterns_.size());
    patterns_.push_back(token);
  }
}

size_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, int32_t* pattern) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto it = nodes_[node].next.find(static_cast<unsigned char>(text[i]));
    if (it == nodes_[node].next.end()) break;
    node = it->second;
    if (nodes_[node].pattern >= 0) {
      best = i + 1 - pos;
      *pattern = nodes_[node].pattern;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, bool at_start, std::vector<Segment>& out) const {
  if (patterns_.empty()) {
    if (!text.empty()) out.push_back({std::string(text), -1, at_start});
    return;
  }
  size_t done = 0;  // end of the last emitted segment
  size_t pos = 0;   // where the next match may start (matches never overlap)
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    int32_t index = -1;
    const size_t len = longest_at(text, pos, &index);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = patterns_[index];
    size_t start = pos, stop = pos + len;
    pos = stop;
    if (token.single_word) {
      size_t n = 0;
      const bool left_ok = start == 0 || !is_word_char(last_char(text, start));
      const bool right_ok = stop == text.size() || !is_word_char(unicode::decode_at(text, stop, &n));
      if (!left_ok || !right_ok) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > done && unicode::is_whitespace(last_char(text, s))) {
        size_t n = 0;
        size_t p = s - 1;
        while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        unicode::decode_at(text, p, &n);
        s = p;
      }
      start = s;
    }
    if (token.rstrip) {
      size_t n = 0;
      while (stop < text.size() && unicode::is_whitespace(unicode::decode_at(text, stop, &n))) stop += n;
      pos = stop;
    }
    if (done < start) out.push_back({std::string(text.substr(done, start - done)), -1, at_start && done == 0});
    out.push_back({std::string(text.substr(start, stop - start)), token.id, at_start && start == 0});
    done = stop;
  }
  if (done < text.size()) out.push_back({std::string(text.substr(done)), -1, at_start && done == 0});
}

}  // namespace unstuck::tokenizer
