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

constexpr const char* kFunctions[] = {"sin",    "cos",    "tan",  "sec",  "csc",  "cot",
                                      "ln",     "log",    "exp",  "arcsin", "arccos", "arctan",
                                      "sinh",   "cosh",   "tanh", "lg"};

// Short letter runs that are words (units, currency, separators) rather than products of
// single-letter variables ("xy" is x*y, "cm" is a unit). Runs of 4+ letters are always words.
constexpr const char* kShortWords[] = {
    "cm",  "mm",  "km",  "kg",  "mg",  "ft",  "yd",  "mi",  "hr",  "hrs", "min", "ml",  "oz",
    "lb",  "lbs", "mph", "kph", "sq",  "in",  "and", "or",  "day", "usd", "rs",  "cal", "deg",
    "rad", "yes", "no",  "am",  "pm",  "gal", "qt",  "pt",  "sec", "ms",  "kw",  "mpg", "cc"};

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

std::vector<Token> lex(std::string_view s, bool& ok) {
  std::vector<Token> out;
  ok = true;
  bool space = false;
  size_t i = 0;
  int enclosed = 0;  // open ( [ \{ around here: inside them a comma separates items, never thousands
  auto push = [&](Tok k, std::string text) {
    if (k == Tok::lparen || k == Tok::lbracket || k == Tok::lset) ++enclosed;
    if ((k == Tok::rparen || k == Tok::rbracket || k == Tok::rset) && enclosed > 0) --enclosed;
    out.push_back({k, std::move(text), space});
    space = false;
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ') {
      space = true;
      ++i;
      continue;
    }
    if (is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(s[i + 1]))) {
      // Digits with thousands separators ("10,000": one to three leading digits, not starting
      // with 0, then groups of exactly three, no space after the comma, outside brackets:
      // "[0,100]", "(1,500)" and "0,100" are pairs), one decimal point, and an exponent ("1.5e-3").
      std::string num;
      size_t j = i;
      size_t group = 0;
      while (j < s.size() && is_digit(s[j])) num += s[j++], ++group;
      const bool may_group = enclosed == 0 && group >= 1 && group <= 3 && c != '0';
      while (may_group && j + 3 < s.size() && s[j] == ',' &&
             is_digit(s[j + 1]) && is_digit(s[j + 2]) && is_digit(s[j + 3]) &&
             (j + 4 >= s.size() || !is_digit(s[j + 4]))) {
        num.append(s.substr(j + 1, 3));
        j += 4;
      }
      if (j < s.size() && s[j] == '.' && !(j + 1 < s.size() && s[j + 1] == '.')) {
        num += '.';
        ++j;
        while (j < s.size() && is_digit(s[j])) num += s[j++];
      }
      if (j + 1 < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && is_digit(s[k])) {
          num += 'e';
          if (s[j + 1] == '-') num += '-';
          j = k;
          while (j < s.size() && is_digit(s[j])) num += s[j++];
        }
      }
      push(Tok::number, std::move(num));
      i = j;
      continue;
    }
    if (is_letter(c)) {
      size_t j = i;
      while (j < s.size() && is_letter(s[j])) ++j;
      const std::string_view run = s.substr(i, j - i);
      if (run.size() == 1) {
        push(Tok::variable, std::string(run));
      } else if (is_function(run)) {
        push(Tok::command, std::string(run));
      } else if (run.size() >= 4 || is_short_word(run)) {
        push(Tok::word, std::string(run));
      } else {
        for (const char v : run) push(Tok::variable, std::string(1, v));
      }
      i = j;
      continue;
    }
    if (c == kTextOpen) {
      const size_t close = s.find(kTextClose, i);
      const size_t end = close == std::string_view::npos ? s.size() : close;
      push(Tok::text, std::string(s.substr(i + 1, end - i - 1)));
      i = end + 1;
      continue;
    }
    if (c == '\\') {
      size_t j = i + 1;
      while (j < s.size() && is_letter(s[j])) ++j;
      if (j == i + 1) {
        const char d = i + 1 < s.size() ? s[i + 1] : ' ';
        if (d == '{') push(Tok::lset, "");
        else if (d == '}') push(Tok::rset, "");
        else if (d == '\\') push(Tok::rowsep, "");
        else ok = false;
        i += 2;
        continue;
      }
      const std::string_view name = s.substr(i + 1, j - i - 1);
      if (name == "le") push(Tok::relation, "l");
      else if (name == "ge") push(Tok::relation, "g");
      else if (name == "ne") push(Tok::relation, "n");
      else if (name == "in") push(Tok::relation, "i");
      else if (name == "approx") push(Tok::relation, "=");
      else push(Tok::command, std::string(name));
      i = j;
      continue;
    }
    Tok k = Tok::other;
    std::string text(1, c);
    switch (c) {
      case '(': k = Tok::lparen; break;
      case ')': k = Tok::rparen; break;
      case '[': k = Tok::lbracket; break;
      case ']': k = Tok::rbracket; break;
      case '{': k = Tok::lgroup; break;
      case '}': k = Tok::rgroup; break;
      case ',': k = Tok::comma; break;
      case ';': k = Tok::semicolon; break;
      case '+': k = Tok::plus; break;
      case '-': k = Tok::minus; break;
      case '*': k = Tok::star; break;
      case '/': k = Tok::slash; break;
      case '^': k = Tok::caret; break;
      case '_': k = Tok::underscore; break;
      case '!': k = Tok::bang; break;
      case '|': k = Tok::bar; break;
      case '&': k = Tok::amp; break;
      case '=': k = Tok::relation; break;
      case '<':
      case '>':
        k = Tok::relation;
        if (i + 1 < s.size() && s[i + 1] == '=') {
          text = c == '<' ? "l" : "g";
          ++i;
        }
        break;
      default: break;
    }
    if (k == Tok::other) {
      if (c == '.' || c == ':' || c == '\'' || c == '"' || c == '?') {  // punctuation: a gap
        space = true;
        ++i;
        continue;
      }
      ok = false;  // a character math has no reading for
      push(k, text);
      ++i;
      continue;
    }
    push(k, std::move(text));
    ++i;
  }
  out.push_back({Tok::end, "", space});
  return out;
}

}  // namespace unstuck::reward::math
