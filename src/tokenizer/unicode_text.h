// UTF-8 and Unicode helpers for the tokenizer.json pipeline: decoding code points, the character
// classes the Hugging Face `tokenizers` library uses (Rust's char::is_whitespace / is_numeric,
// regex \w), Unicode normalization forms (utf8proc) and Rust's lossy UTF-8 decoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace unstuck::tokenizer::unicode {

// Byte length of the UTF-8 sequence starting with `lead` (1 for an invalid lead byte).
inline size_t char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// The code point at text[pos] (text must be valid UTF-8); `len` receives its byte length.
char32_t decode_at(std::string_view text, size_t pos, size_t* len);
void append_utf8(std::string& out, char32_t cp);

// Offset of the first byte that is not part of valid UTF-8, or npos when all of `text` is valid.
size_t invalid_utf8_offset(std::string_view text);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string lossy_utf8(std::string_view bytes);

bool is_whitespace(char32_t cp);       // Unicode White_Space (Rust char::is_whitespace)
bool is_numeric(char32_t cp);          // categories Nd, Nl, No (Rust char::is_numeric)
bool is_regex_word_char(char32_t cp);  // \w: L*, M*, Nd, Nl, Pc, U+200C, U+200D

enum class NormalForm { nfc, nfd, nfkc, nfkd };
std::string normalize(std::string_view text, NormalForm form);

}  // namespace unstuck::tokenizer::unicode
