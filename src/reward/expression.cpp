// Recursive-descent evaluator for countdown expressions with exact int64 rationals. Recursion is
// bounded by the parenthesis depth limit, the input by the length limit; arithmetic goes through
// 128-bit intermediates and is checked, so no input can overflow, crash or run long.
#include "reward/expression.h"

#include <cstdlib>

namespace unstuck::reward {
namespace {

using int128 = __int128;

constexpr int64_t kMaxLiteral = 1000000000000000LL;  // 1e15: larger literals are overflow

int128 abs128(int128 x) { return x < 0 ? -x : x; }

int128 gcd128(int128 a, int128 b) {
  a = abs128(a);
  b = abs128(b);
  while (b != 0) {
    const int128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

class Parser {
 public:
  Parser(std::string_view text, const ExpressionLimits& limits) : text_(text), limits_(limits) {}

  ExpressionResult run() {
    ExpressionResult result;
    skip_spaces();
    if (pos_ == text_.size()) {
      result.status = ExprStatus::empty;
      return result;
    }
    const Rational value = expression();
    if (syntax_ == ExprStatus::ok && pos_ != text_.size()) syntax_ = ExprStatus::syntax_error;
    if (syntax_ != ExprStatus::ok) {
      result.status = syntax_;
      return result;
    }
    result.literals = std::move(literals_);
    result.status = arithmetic_;
    if (arithmetic_ == ExprStatus::ok) result.value = value;
    return result;
  }

 private:
  bool failed() const { return syntax_ != ExprStatus::ok; }

  void skip_spaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }

  // Records the first arithmetic problem and carries on with 0 so that the rest of the input is
  // still checked for syntax (a syntax error outranks it).
  Rational arithmetic_error(ExprStatus status) {
    if (arithmetic_ == ExprStatus::ok) arithmetic_ = status;
    return Rational{};
  }

  Rational make(int128 num, int128 den) {
    if (den < 0) {
      num = -num;
      den = -den;
    }
    const int128 g = gcd128(num, den);
    if (g > 1) {
      num /= g;
      den /= g;
    }
    constexpr int128 kMax = INT64_MAX;
    if (abs128(num) > kMax || den > kMax) return arithmetic_error(ExprStatus::overflow);
    return Rational{static_cast<int64_t>(num), static_cast<int64_t>(den)};
  }

  Rational apply(char op, Rational a, Rational b) {
    // |num|, den < 2^63, so every product below is < 2^126 and each sum < 2^127.
    const int128 an = a.num, ad = a.den, bn = b.num, bd = b.den;
    switch (op) {
      case '+':
        return make(an * bd + bn * ad, ad * bd);
      case '-':
        return make(an * bd - bn * ad, ad * bd);
      case '*':
        return make(an * bn, ad * bd);
      default:
        if (b.num == 0) return arithmetic_error(ExprStatus::division_by_zero);
        return make(an * bd, ad * bn);
    }
  }

  // expression := term (('+' | '-') term)*
  Rational expression() {
    Rational value = term();
    while (!failed()) {
      skip_spaces();
      if (pos_ >= text_.size() || (text_[pos_] != '+' && text_[pos_] != '-')) break;
      const char op = text_[pos_++];
      const Rational rhs = term();
      if (failed()) break;
      value = apply(op, value, rhs);
    }
    return value;
  }

  // term := factor (('*' | '/') factor)*
  Rational term() {
    Rational value = factor();
    while (!failed()) {
      skip_spaces();
      if (pos_ >= text_.size() || (text_[pos_] != '*' && text_[pos_] != '/')) break;
      const char op = text_[pos_++];
      const Rational rhs = factor();
      if (failed()) break;
      value = apply(op, value, rhs);
    }
    return value;
  }

  // factor := integer | '(' expression ')'
  Rational factor() {
    skip_spaces();
    if (pos_ >= text_.size()) {
      syntax_ = ExprStatus::syntax_error;
      return Rational{};
    }
    if (text_[pos_] == '(') {
      if (++depth_ > limits_.max_depth) {
        syntax_ = ExprStatus::too_deep;
        return Rational{};
      }
      ++pos_;
      const Rational value = expression();
      if (failed()) return value;
      skip_spaces();
      if (pos_ >= text_.size() || text_[pos_] != ')') {
        syntax_ = ExprStatus::syntax_error;
        return Rational{};
      }
      ++pos_;
      --depth_;
      return value;
    }
    if (text_[pos_] < '0' || text_[pos_] > '9') {
      syntax_ = ExprStatus::syntax_error;
      return Rational{};
    }
    int64_t literal = 0;
    bool too_big = false;
    for (; pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; ++pos_) {
      if (!too_big) literal = literal * 10 + (text_[pos_] - '0');
      too_big = too_big || literal > kMaxLiteral;
    }
    if (too_big) {
      literals_.push_back(-1);  // matches no given number
      return arithmetic_error(ExprStatus::overflow);
    }
    literals_.push_back(literal);
    return Rational{literal, 1};
  }

  std::string_view text_;
  const ExpressionLimits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  ExprStatus syntax_ = ExprStatus::ok;
  ExprStatus arithmetic_ = ExprStatus::ok;
  std::vector<int64_t> literals_;
};

}  // namespace

ExpressionResult evaluate_expression(std::string_view text, const ExpressionLimits& limits) {
  if (text.size() > limits.max_chars) {
    ExpressionResult result;
    result.status = ExprStatus::too_long;
    return result;
  }
  return Parser(text, limits).run();
}

}  // namespace unstuck::reward
