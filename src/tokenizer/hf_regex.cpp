// PCRE2 wrapper for tokenizer.json split patterns (see hf_regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf_regex.h"

#include <pcre2.h>

#include <memory>
#include <stdexcept>

#include "tokenizer/unicode_text.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer {
namespace {

// Oniguruma's \s is Unicode White_Space; PCRE2's (with UCP) is tab..CR plus category Z, which
// leaves out U+0085 (NEXT LINE). Add it back wherever the pattern uses \s or \S.
std::string onig_to_pcre2(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) {
  const std::string translated = onig_to_pcre2(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw UserError(where + ": regex '" + pattern + "' does not compile at offset " + std::to_string(offset) + ": " +
                    reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when unavailable
}

Regex::Regex(Regex&& other) noexcept : code_(other.code_) { other.code_ = nullptr; }
Regex& Regex::operator=(Regex&& other) noexcept {
  std::swap(code_, other.code_);
  return *this;
}
Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(code_);
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  // One match block per thread: Tokenizer::encode may run on several threads at once.
  thread_local std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create(16, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw std::runtime_error(std::string("regex match failed: ") + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {
      if (e >= text.size()) break;
      start = e + unicode::char_length(static_cast<unsigned char>(text[e]));
    }
  }
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace unstuck::tokenizer
