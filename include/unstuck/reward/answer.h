// Reading a final answer out of a completion (<answer>x</answer>, \boxed{x}, #### x, or the last
// expression of free text) and
// normalizing numbers so that equal values compare equal as text ("1,234.50" -> "1234.5",
// "2/4" -> "0.5", "$+7.0$" -> "7"). Pure functions, linear in the input length.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace unstuck::reward {

enum class AnswerFormat {
  answer_tag,       // the last <answer>...</answer> pair
  boxed,            // the last \boxed{...} or \fbox{...}, braces balanced
  hashes,           // the text after the last "####", to the end of its line
  last_expression,  // free text: "final answer is X", "answer: X", else the expression ending last
};

inline constexpr std::array<std::pair<AnswerFormat, const char*>, 4> kAnswerFormatNames{{
    {AnswerFormat::answer_tag, "answer_tag"},
    {AnswerFormat::boxed, "boxed"},
    {AnswerFormat::hashes, "hashes"},
    {AnswerFormat::last_expression, "last_expression"},
}};
constexpr const auto& enum_names(AnswerFormat) { return kAnswerFormatNames; }

// The formats named in a config list, in order. Throws UserError naming `key` and listing the
// known names for an unknown one.
std::vector<AnswerFormat> parse_answer_formats(const std::vector<std::string>& names, const std::string& key);

// The answer in `completion` in one format, trimmed of whitespace; nullopt when that format is
// absent or its content is blank.
std::optional<std::string> extract_answer(std::string_view completion, AnswerFormat format);
// The first format of `order` that yields an answer.
std::optional<std::string> extract_answer(std::string_view completion, const std::vector<AnswerFormat>& order);

// The answers free text offers, in the order they are tried (math-verify's "last expression"
// extraction; at most kMaxFreeTextAnswers):
//  1. after the last "final answer" followed within 100 characters by " is" (case-insensitive):
//     the expression that starts right after "is", an optional ':' and spaces;
//  2. after the last "answer:", then the last "answer": the number or expression after the last
//     '=' of its line within 100 characters (outside math environments), else the first
//     expression that starts within 50 characters (a number on the anchor's line, not followed
//     by '=');
//  3. every expression of the text, the one ending last first (on a tie, the longer).
// An expression is a math environment ($x$, $$x$$, \(x\), \[x\], " [x] "), a bare
// \frac{a}{b}, a number (sign, thousands separators, decimals, a currency sign before it) or an
// arithmetic expression of numbers (+ - * / ^ x ÷ and parentheses); numbers and arithmetic
// expressions count as whole words only (after a space, '=' or "**", or at the start). Returned
// without their $ and brackets. Linear in the completion's length.
inline constexpr size_t kMaxFreeTextAnswers = 16;
std::vector<std::string> free_text_answers(std::string_view completion);

// True when the completion holds a <answer>...</answer> pair with non-blank content (what the
// format reward credits).
bool has_answer_tag(std::string_view completion);

// Canonical text of a number, or nullopt when `text` is not one. Accepts integers, decimals,
// fractions a/b and \frac{a}{b}, a leading + or -, thousands separators in groups of three
// ("12,345"), surrounding spaces and $. Output: no leading zeros, no trailing fractional zeros,
// no "-0", fractions reduced and written as decimals when they terminate ("3/4" -> "0.75",
// "1/3" -> "1/3").
std::optional<std::string> normalize_number(std::string_view text);

}  // namespace unstuck::reward
