// Reading a final answer out of a completion (<answer>x</answer>, \boxed{x}, #### x) and
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
  answer_tag,  // the last <answer>...</answer> pair
  boxed,       // the last \boxed{...} or \fbox{...}, braces balanced
  hashes,      // the text after the last "####", to the end of its line
};

inline constexpr std::array<std::pair<AnswerFormat, const char*>, 3> kAnswerFormatNames{{
    {AnswerFormat::answer_tag, "answer_tag"},
    {AnswerFormat::boxed, "boxed"},
    {AnswerFormat::hashes, "hashes"},
}};
constexpr const auto& enum_names(AnswerFormat) { return kAnswerFormatNames; }

// The formats named in a config list, in order. Throws UserError naming `key` and listing the
// known names for an unknown one.
std::vector<AnswerFormat> parse_answer_formats(const std::vector<std::string>& names,
                                               const std::string& key);

// The answer in `completion` in one format, trimmed of whitespace; nullopt when that format is
// absent or its content is blank.
std::optional<std::string> extract_answer(std::string_view completion, AnswerFormat format);
// The first format of `order` that yields an answer.
std::optional<std::string> extract_answer(std::string_view completion,
                                          const std::vector<AnswerFormat>& order);

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
