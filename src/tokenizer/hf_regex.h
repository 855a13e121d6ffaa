// A compiled PCRE2 regular expression (UTF-8, Unicode properties, JIT) for the split patterns of
// tokenizer.json files. Patterns are written for Oniguruma (what `tokenizers` uses); the one place
// the two engines differ on these patterns, `\s`, is rewritten to Oniguruma's meaning.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace unstuck::tokenizer {

class Regex {
 public:
  // Throws UserError naming `where` (the JSON path) when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Non-overlapping matches of the pattern in `text` (valid UTF-8), left to right, as
  // [begin, end) byte offsets; an empty match advances by one character.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

// Escapes `literal` so it matches itself as a PCRE2 pattern.
std::string regex_escape(std::string_view literal);

}  // namespace unstuck::tokenizer
