// UTF-8 decoding and Unicode properties for the tokenizer.json pipeline (see unicode_text.h).
// Categories and normalization come from utf8proc, so they follow one Unicode version.
#include "tokenizer/unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>

namespace unstuck::tokenizer::unicode {
namespace {

// Length of the valid prefix of a UTF-8 sequence at bytes[pos] (0 when the lead byte is invalid),
// and whether it is complete: the rule Rust's Utf8Chunks uses to size each invalid subsequence.
size_t valid_prefix(std::string_view b, size_t pos, bool* complete) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(b[i]); };
  const unsigned char c = at(pos);
  *complete = false;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c < 0x80) {
    *complete = true;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  size_t n = 1;
  for (; n < need && pos + n < b.size(); ++n) {
    const unsigned char d = at(pos + n);
    const unsigned char l = n == 1 ? lo : 0x80, h = n == 1 ? hi : 0xBF;
    if (d < l || d > h) return n;
  }
  *complete = n == need;
  return n;
}

}  // namespace

char32_t decode_at(std::string_view text, size_t pos, size_t* len) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char c = at(pos);
  *len = char_length(c);
  switch (*len) {
    case 1:
      return c;
    case 2:
      return ((c & 0x1Fu) << 6) | (at(pos + 1) & 0x3Fu);
    case 3:
      return ((c & 0x0Fu) << 12) | ((at(pos + 1) & 0x3Fu) << 6) | (at(pos + 2) & 0x3Fu);
    default:
      return ((c & 0x07u) << 18) | ((at(pos + 1) & 0x3Fu) << 12) | ((at(pos + 2) & 0x3Fu) << 6) | (at(pos + 3) & 0x3Fu);
  }
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t invalid_utf8_offset(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    bool complete = false;
    const size_t n = valid_prefix(text, pos, &complete);
    if (!complete) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

std::string lossy_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    const size_t n = valid_prefix(bytes, pos, &complete);
    if (complete) {
      out.append(bytes.substr(pos, n));
      pos += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal invalid subsequence
      pos += n == 0 ? 1 : n;
    }
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_numeric(char32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_regex_word_char(char32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_ME) || cat == UTF8PROC_CATEGORY_ND ||
         cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_PC || cp == 0x200C || cp == 0x200D;
}

std::string normalize(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw std::runtime_error(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace unstuck::tokenizer::unicode
