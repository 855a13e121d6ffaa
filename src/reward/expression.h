// Safe evaluation of countdown answers: integer literals, + - * /, parentheses and spaces, in exact
// rational arithmetic. Never throws or recurses past a depth limit; the work is linear in the
// input, which is rejected unread beyond a length limit. Overflow and division by zero are
// reported, not undefined.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace unstuck::reward {

// num / den in lowest terms, den > 0.
struct Rational {
  int64_t num = 0;
  int64_t den = 1;
};

enum class ExprStatus {
  ok,
  empty,             // nothing but spaces
  syntax_error,      // unexpected character or token, unbalanced parentheses
  too_long,          // more characters than ExpressionLimits::max_chars
  too_deep,          // parentheses nested deeper than ExpressionLimits::max_depth
  division_by_zero,  // a divisor evaluated to 0
  overflow,          // a literal or an intermediate value left the int64 rational range
};

inline constexpr std::array<std::pair<ExprStatus, const char*>, 7> kExprStatusNames{{
    {ExprStatus::ok, "ok"},
    {ExprStatus::empty, "empty"},
    {ExprStatus::syntax_error, "syntax_error"},
    {ExprStatus::too_long, "too_long"},
    {ExprStatus::too_deep, "too_deep"},
    {ExprStatus::division_by_zero, "division_by_zero"},
    {ExprStatus::overflow, "overflow"},
}};
constexpr const auto& enum_names(ExprStatus) { return kExprStatusNames; }

struct ExpressionLimits {
  size_t max_chars = 256;  // longer input is rejected without being read
  int max_depth = 32;      // parenthesis nesting
};

struct ExpressionResult {
  ExprStatus status = ExprStatus::empty;
  Rational value;                 // valid when status == ok
  std::vector<int64_t> literals;  // the numbers written, in order (when the syntax is valid)
};

// Parses and evaluates `text`. Syntax problems (syntax_error, too_long, too_deep, empty) take
// precedence over arithmetic ones (division_by_zero, overflow), whose literals are still listed.
// Unary signs, decimals and other characters are syntax errors.
//   "(3+5)*7-2" -> ok, 54, literals {3, 5, 7, 2};  "7/(2-2)" -> division_by_zero
ExpressionResult evaluate_expression(std::string_view text, const ExpressionLimits& limits = {});

}  // namespace unstuck::reward
