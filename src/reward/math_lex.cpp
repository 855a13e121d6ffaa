// Lexer for normalized math answers: numbers (with thousands groups, decimals, exponents),
// variables, words (units, text), commands and symbols, in one forward pass.
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "reward/math_syntax.h"

namespace unstuck::reward::math {
namespace {

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

constexpr const char* kFunctions[] = {"sin", "cos",    "tan",    "sec",    "csc",  "cot",  "ln",   "log",
                                      "exp", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "lg"};

// Short letter runs that are words (units, currency, separators) rather than products of
// single-letter variables ("xy" is x*y, "cm" is a unit). Runs of 4+ letters are always words.
constexpr const char* kShortWords[] = {"cm",  "mm",  "km",  "kg", "mg",  "ft",  "yd",  "mi",  "hr", "hrs",
                                       "min", "ml",  "oz",  "lb", "lbs", "mph", "kph", "sq",  "in", "and",
                                       "or",  "day", "usd", "rs", "cal", "deg", "rad", "yes", "no", "am",
                                       "pm",  "gal", "qt",  "pt", "sec", "ms",  "kw",  "mpg", "cc"};

bool is_short_word(std::string_view w) {
  std::string lower;
  for (const char c : w) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* s : kShortWords) {
    if (lower == s) return true;
  }
  return false;
}

}  // namespace

bool is_function(std::string_view w) {
  for (const char* f : kFunctions) {
    if (w == f) return true;
  }
  return false;
}

namespace {

// One forward pass over a normalized answer: each method reads one kind of token at i_ and moves
// past it.
class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  std::vector<Token> run(bool& ok) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ') {
        space_ = true;
        ++i_;
      } else if (is_digit(c) || (c == '.' && i_ + 1 < s_.size() && is_digit(s_[i_ + 1]))) {
        number();
      } else if (is_letter(c)) {
        letters();
      } else if (c == kTextOpen) {
        text();
      } else if (c == '\\') {
        command();
      } else {
        symbol();
      }
    }
    out_.push_back({Tok::end, "", space_});
    ok = ok_;
    return std::move(out_);
  }

 private:
  void push(Tok k, std::string text) {
    if (k == Tok::lparen || k == Tok::lbracket || k == Tok::lset) ++enclosed_;
    if ((k == Tok::rparen || k == Tok::rbracket || k == Tok::rset) && enclosed_ > 0) --enclosed_;
    out_.push_back({k, std::move(text), space_});
    space_ = false;
  }
  bool digit_at(size_t j) const { return j < s_.size() && is_digit(s_[j]); }

  // Digits with thousands separators ("10,000": one to three leading digits, not starting with 0,
  // then groups of exactly three, no space after the comma, outside brackets: "[0,100]", "(1,500)"
  // and "0,100" are pairs), one decimal point, and an exponent ("1.5e-3").
  void number() {
    std::string num;
    size_t j = i_;
    size_t group = 0;
    while (digit_at(j)) num += s_[j++], ++group;
    const bool may_group = enclosed_ == 0 && group >= 1 && group <= 3 && s_[i_] != '0';
    while (may_group && j + 3 < s_.size() && s_[j] == ',' && digit_at(j + 1) && digit_at(j + 2) && digit_at(j + 3) &&
           !digit_at(j + 4)) {
      num.append(s_.substr(j + 1, 3));
      j += 4;
    }
    if (j < s_.size() && s_[j] == '.' && !(j + 1 < s_.size() && s_[j + 1] == '.')) {
      num += '.';
      ++j;
      while (digit_at(j)) num += s_[j++];
    }
    if (j + 1 < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      size_t k = j + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (digit_at(k)) {
        num += 'e';
        if (s_[j + 1] == '-') num += '-';
        j = k;
        while (digit_at(j)) num += s_[j++];
      }
    }
    push(Tok::number, std::move(num));
    i_ = j;
  }

  // A run of letters: one variable, a function name, a word, or a product of variables ("xy").
  void letters() {
    size_t j = i_;
    while (j < s_.size() && is_letter(s_[j])) ++j;
    const std::string_view run = s_.substr(i_, j - i_);
    if (run.size() == 1) {
      push(Tok::variable, std::string(run));
    } else if (is_function(run)) {
      push(Tok::command, std::string(run));
    } else if (run.size() >= 4 || is_short_word(run)) {
      push(Tok::word, std::string(run));
    } else {
      for (const char v : run) push(Tok::variable, std::string(1, v));
    }
    i_ = j;
  }

  // \text{...} as the normalizer marked it: one text token.
  void text() {
    const size_t close = s_.find(kTextClose, i_);
    const size_t end = close == std::string_view::npos ? s_.size() : close;
    push(Tok::text, std::string(s_.substr(i_ + 1, end - i_ - 1)));
    i_ = end + 1;
  }

  // A backslash: \{ \} \\, a relation (\le \ge \ne \in \approx) or any other command.
  void command() {
    size_t j = i_ + 1;
    while (j < s_.size() && is_letter(s_[j])) ++j;
    if (j == i_ + 1) {
      const char d = i_ + 1 < s_.size() ? s_[i_ + 1] : ' ';
      if (d == '{')
        push(Tok::lset, "");
      else if (d == '}')
        push(Tok::rset, "");
      else if (d == '\\')
        push(Tok::rowsep, "");
      else
        ok_ = false;
      i_ += 2;
      return;
    }
    const std::string_view name = s_.substr(i_ + 1, j - i_ - 1);
    if (name == "le")
      push(Tok::relation, "l");
    else if (name == "ge")
      push(Tok::relation, "g");
    else if (name == "ne")
      push(Tok::relation, "n");
    else if (name == "in")
      push(Tok::relation, "i");
    else if (name == "approx")
      push(Tok::relation, "=");
    else
      push(Tok::command, std::string(name));
    i_ = j;
  }

  // One character: a bracket, an operator or a relation; punctuation is a gap; anything else is a
  // character math has no reading for.
  void symbol() {
    const char c = s_[i_];
    std::string text(1, c);
    const Tok k = symbol_kind(c);
    if (k == Tok::relation && (c == '<' || c == '>') && i_ + 1 < s_.size() && s_[i_ + 1] == '=') {
      text = c == '<' ? "l" : "g";
      ++i_;
    }
    ++i_;
    if (k != Tok::other) return push(k, std::move(text));
    if (c == '.' || c == ':' || c == '\'' || c == '"' || c == '?') {
      space_ = true;
      return;
    }
    ok_ = false;
    push(k, text);
  }

  static Tok symbol_kind(char c) {
    switch (c) {
      case '(':
        return Tok::lparen;
      case ')':
        return Tok::rparen;
      case '[':
        return Tok::lbracket;
      case ']':
        return Tok::rbracket;
      case '{':
        return Tok::lgroup;
      case '}':
        return Tok::rgroup;
      case ',':
        return Tok::comma;
      case ';':
        return Tok::semicolon;
      case '+':
        return Tok::plus;
      case '-':
        return Tok::minus;
      case '*':
        return Tok::star;
      case '/':
        return Tok::slash;
      case '^':
        return Tok::caret;
      case '_':
        return Tok::underscore;
      case '!':
        return Tok::bang;
      case '|':
        return Tok::bar;
      case '&':
        return Tok::amp;
      case '=':
      case '<':
      case '>':
        return Tok::relation;
      default:
        return Tok::other;
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  std::vector<Token> out_;
  bool ok_ = true;
  bool space_ = false;
  int enclosed_ = 0;  // open ( [ \{ around here: inside them a comma separates items, never thousands
};

}  // namespace

std::vector<Token> lex(std::string_view s, bool& ok) { return Lexer(s).run(ok); }

}  // namespace unstuck::reward::math
