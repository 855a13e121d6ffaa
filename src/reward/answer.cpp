// Answer extraction (<answer>, \boxed, ####) and number normalization. Every function here scans
// its input a bounded number of times: no backtracking, no regex, no recursion.
#include "unstuck/reward/answer.h"

#include <cstdint>
#include <string>

#include "unstuck/common/error.h"

namespace unstuck::reward {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!is_digit(c)) return false;
  }
  return true;
}

std::string_view strip_leading_zeros(std::string_view s) {
  while (s.size() > 1 && s.front() == '0') s.remove_prefix(1);
  return s;
}

std::optional<std::string> nonblank(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  return std::string(s);
}

// "12,345,678" -> "12345678"; nullopt unless the groups are 1-3 digits then 3-digit groups, the
// first not starting with 0 ("0,100" is not a hundred).
std::optional<std::string> remove_thousands_separators(std::string_view s) {
  if (s.size() > 1 && s.front() == '0' && s.find(',') != std::string_view::npos) return std::nullopt;
  std::string digits;
  size_t group = 0;  // digits in the current group
  bool first_group = true;
  for (const char c : s) {
    if (c == ',') {
      if (group == 0 || (first_group && group > 3) || (!first_group && group != 3)) {
        return std::nullopt;
      }
      first_group = false;
      group = 0;
    } else if (is_digit(c)) {
      digits += c;
      ++group;
    } else {
      return std::nullopt;
    }
  }
  if (!first_group && group != 3) return std::nullopt;
  return digits;
}

std::optional<std::string> normalize_decimal(std::string_view s, bool negative) {
  const size_t dot = s.find('.');
  std::string_view int_part = s.substr(0, dot);
  std::string_view frac_part = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  if (int_part.empty() && frac_part.empty()) return std::nullopt;
  if (!frac_part.empty() && !all_digits(frac_part)) return std::nullopt;
  std::string int_digits;
  if (!int_part.empty()) {
    const auto digits = remove_thousands_separators(int_part);
    if (!digits) return std::nullopt;
    int_digits = *digits;
  }
  std::string_view whole = strip_leading_zeros(int_digits);
  while (!frac_part.empty() && frac_part.back() == '0') frac_part.remove_suffix(1);
  std::string out = whole.empty() ? "0" : std::string(whole);
  if (!frac_part.empty()) out += "." + std::string(frac_part);
  if (negative && out != "0") out = "-" + out;
  return out;
}

uint64_t gcd(uint64_t a, uint64_t b) {
  while (b != 0) {
    const uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// num/den (digit strings) reduced; as a decimal when the reduced denominator is 2^i 5^j.
std::optional<std::string> normalize_fraction(std::string_view num, std::string_view den, bool negative) {
  num = trim(num);
  den = trim(den);
  if (!all_digits(num) || !all_digits(den)) return std::nullopt;
  num = strip_leading_zeros(num);
  den = strip_leading_zeros(den);
  if (den == "0") return std::nullopt;
  if (num == "0") return std::string("0");
  const std::string sign = negative ? "-" : "";
  if (num.size() > 19 || den.size() > 19) {
    // Beyond uint64: kept unreduced (such answers are far outside what our tasks produce).
    return sign + std::string(num) + "/" + std::string(den);
  }
  uint64_t p = std::stoull(std::string(num));
  uint64_t q = std::stoull(std::string(den));
  const uint64_t g = gcd(p, q);
  p /= g;
  q /= g;
  if (q == 1) return sign + std::to_string(p);
  uint64_t rest = q;
  while (rest % 2 == 0) rest /= 2;
  while (rest % 5 == 0) rest /= 5;
  if (rest != 1) return sign + std::to_string(p) + "/" + std::to_string(q);
  // A terminating decimal: long division, at most ~64 digits since q <= 2^64.
  std::string out = sign + std::to_string(p / q) + ".";
  unsigned __int128 remainder = p % q;
  while (remainder != 0) {
    remainder *= 10;
    out += static_cast<char>('0' + static_cast<int>(remainder / q));
    remainder %= q;
  }
  return out;
}

// "\frac{a}{b}" (or \dfrac, \tfrac) -> {a, b}; nullopt when `s` is not exactly that.
std::optional<std::pair<std::string_view, std::string_view>> latex_fraction(std::string_view s) {
  for (const std::string_view command : {"\\frac{", "\\dfrac{", "\\tfrac{"}) {
    if (s.substr(0, command.size()) != command) continue;
    s.remove_prefix(command.size());
    const size_t close = s.find('}');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != '{' || s.back() != '}') {
      return std::nullopt;
    }
    return std::make_pair(s.substr(0, close), s.substr(close + 2, s.size() - close - 3));
  }
  return std::nullopt;
}

std::string known_names() {
  std::string names;
  for (const auto& [format, name] : kAnswerFormatNames) {
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names;
}

}  // namespace

std::vector<AnswerFormat> parse_answer_formats(const std::vector<std::string>& names, const std::string& key) {
  std::vector<AnswerFormat> formats;
  for (const std::string& name : names) {
    bool known = false;
    for (const auto& [format, format_name] : kAnswerFormatNames) {
      if (name == format_name) {
        formats.push_back(format);
        known = true;
      }
    }
    if (!known) {
      throw UserError(key + ": unknown answer format '" + name + "' (known: " + known_names() + ")");
    }
  }
  if (formats.empty()) {
    throw UserError(key + " must name at least one answer format (" + known_names() + ")");
  }
  return formats;
}

std::optional<std::string> extract_answer(std::string_view completion, AnswerFormat format) {
  switch (format) {
    case AnswerFormat::answer_tag: {
      constexpr std::string_view kOpen = "<answer>";
      const size_t close = completion.rfind("</answer>");
      if (close == std::string_view::npos) return std::nullopt;
      const size_t open = completion.substr(0, close).rfind(kOpen);
      if (open == std::string_view::npos) return std::nullopt;
      return nonblank(completion.substr(open + kOpen.size(), close - open - kOpen.size()));
    }
    case AnswerFormat::boxed: {
      // The last \boxed{ or \fbox{, whichever comes later.
      const size_t boxed = completion.rfind("\\boxed{");
      const size_t fbox = completion.rfind("\\fbox{");
      size_t begin = 0;
      if (boxed != std::string_view::npos && (fbox == std::string_view::npos || boxed > fbox)) {
        begin = boxed + 7;
      } else if (fbox != std::string_view::npos) {
        begin = fbox + 6;
      } else {
        return std::nullopt;
      }
      size_t depth = 1;
      for (size_t i = begin; i < completion.size(); ++i) {
        if (completion[i] == '{') ++depth;
        if (completion[i] == '}' && --depth == 0) {
          return nonblank(completion.substr(begin, i - begin));
        }
      }
      return std::nullopt;  // unbalanced braces
    }
    case AnswerFormat::hashes: {
      const size_t start = completion.rfind("####");
      if (start == std::string_view::npos) return std::nullopt;
      std::string_view rest = completion.substr(start + 4);
      return nonblank(rest.substr(0, rest.find('\n')));
    }
    case AnswerFormat::last_expression: {
      std::vector<std::string> answers = free_text_answers(completion);
      if (answers.empty()) return std::nullopt;
      return std::move(answers.front());
    }
  }
  return std::nullopt;
}

std::optional<std::string> extract_answer(std::string_view completion, const std::vector<AnswerFormat>& order) {
  for (const AnswerFormat format : order) {
    if (auto answer = extract_answer(completion, format)) return answer;
  }
  return std::nullopt;
}

bool has_answer_tag(std::string_view completion) {
  return extract_answer(completion, AnswerFormat::answer_tag).has_value();
}

std::optional<std::string> normalize_number(std::string_view text) {
  std::string_view s = trim(text);
  // Surrounding $ (LaTeX math or currency), then spaces inside them: "$ 42 $", "$$42$$".
  while (!s.empty() && s.front() == '$') s.remove_prefix(1);
  while (!s.empty() && s.back() == '$') s.remove_suffix(1);
  s = trim(s);
  if (s.empty()) return std::nullopt;
  bool negative = false;
  if (s.front() == '+' || s.front() == '-') {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (const auto parts = latex_fraction(s)) {
    return normalize_fraction(parts->first, parts->second, negative);
  }
  const size_t slash = s.find('/');
  if (slash != std::string_view::npos) {
    return normalize_fraction(s.substr(0, slash), s.substr(slash + 1), negative);
  }
  return normalize_decimal(s, negative);
}

}  // namespace unstuck::reward
