// LaTeX and unicode normalization for the math verifier: one pass maps unicode confusables to
// ASCII/LaTeX, a second rewrites LaTeX commands into the parser's dialect. Both copy forward with
// no backtracking, so the work is linear in the input.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "reward/math_syntax.h"

namespace unstuck::reward::math {
namespace {

struct Confusable {
  const char* utf8;
  const char* ascii;
};

// Unicode characters that models write for ASCII or LaTeX ones.
constexpr Confusable kConfusables[] = {
    {"\xe2\x88\x92", "-"},
    {"\xe2\x80\x93", "-"},
    {"\xe2\x80\x94", "-"},
    {"\xe2\x80\x90", "-"},
    {"\xe2\x80\x91", "-"},
    {"\xef\xb9\xa3", "-"},
    {"\xef\xbc\x8d", "-"},
    {"\xc3\x97", "*"},
    {"\xe2\x8b\x85", "*"},
    {"\xc2\xb7", "*"},
    {"\xe2\x88\x99", "*"},
    {"\xc3\xb7", "/"},
    {"\xe2\x88\x95", "/"},
    {"\xcf\x80", "\\pi "},
    {"\xe2\x88\x9e", "\\infty "},
    {"\xe2\x88\x9a", "\\sqrt"},
    {"\xc2\xb0", ""},
    {"\xc2\xa0", " "},
    {"\xe2\x80\x89", " "},
    {"\xe2\x80\xaf", " "},
    {"\xe2\x80\x87", " "},
    {"\xe2\x80\x8b", ""},
    {"\xe3\x80\x80", " "},
    {"\xef\xbc\x8b", "+"},
    {"\xef\xbc\x8c", ","},
    {"\xef\xbc\x8e", "."},
    {"\xef\xbc\x88", "("},
    {"\xef\xbc\x89", ")"},
    {"\xef\xbc\x9d", "="},
    {"\xef\xbc\x85", ""},
    {"\xc2\xbd", "(1/2)"},
    {"\xc2\xbc", "(1/4)"},
    {"\xc2\xbe", "(3/4)"},
    {"\xc2\xb2", "^{2}"},
    {"\xc2\xb3", "^{3}"},
    {"\xc2\xb9", "^{1}"},
    {"\xe2\x89\xa4", "\\le "},
    {"\xe2\x89\xa5", "\\ge "},
    {"\xe2\x89\xa0", "\\ne "},
    {"\xe2\x88\xaa", "\\cup "},
    {"\xe2\x88\x85", "\\emptyset "},
    {"\xc2\xb1", "\\pm "},
    {"\xe2\x80\x98", "'"},
    {"\xe2\x80\x99", "'"},
    {"\xe2\x80\x9c", "\""},
    {"\xe2\x80\x9d", "\""},
};

std::string map_confusables(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += s[i++];
      continue;
    }
    // Full-width digits U+FF10..U+FF19: EF BC 90..99.
    if (c == 0xef && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0xbc &&
        static_cast<unsigned char>(s[i + 2]) >= 0x90 && static_cast<unsigned char>(s[i + 2]) <= 0x99) {
      out += static_cast<char>('0' + (static_cast<unsigned char>(s[i + 2]) - 0x90));
      i += 3;
      continue;
    }
    bool mapped = false;
    for (const Confusable& m : kConfusables) {
      const size_t n = std::strlen(m.utf8);
      if (s.compare(i, n, m.utf8) == 0) {
        out += m.ascii;
        i += n;
        mapped = true;
        break;
      }
    }
    if (!mapped) out += s[i++];
  }
  return out;
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

struct Rewrite {
  const char* command;
  const char* replacement;
};

// Commands replaced by fixed text (after the backslash). Anything not here is copied as is.
constexpr Rewrite kRewrites[] = {
    {"left", ""},          {"right", ""},        {"bigl", ""},
    {"bigr", ""},          {"Bigl", ""},         {"Bigr", ""},
    {"big", ""},           {"Big", ""},          {"bigg", ""},
    {"Bigg", ""},          {"biggl", ""},        {"biggr", ""},
    {"displaystyle", ""},  {"textstyle", ""},    {"limits", ""},
    {"quad", " "},         {"qquad", " "},       {"dfrac", "\\frac"},
    {"tfrac", "\\frac"},   {"cfrac", "\\frac"},  {"dbinom", "\\binom"},
    {"tbinom", "\\binom"}, {"cdot", "*"},        {"times", "*"},
    {"ast", "*"},          {"div", "/"},         {"circ", ""},
    {"degree", ""},        {"leq", "\\le"},      {"leqslant", "\\le"},
    {"geq", "\\ge"},       {"geqslant", "\\ge"}, {"lt", "<"},
    {"gt", ">"},           {"neq", "\\ne"},      {"lbrace", "\\{"},
    {"rbrace", "\\}"},     {"langle", "("},      {"rangle", ")"},
    {"lvert", "|"},        {"rvert", "|"},       {"vert", "|"},
    {"mid", "|"},          {"infin", "\\infty"}, {"varnothing", "\\emptyset"},
    {"varpi", "\\pi"},     {"hline", ""},        {"mathbf", ""},
    {"boldsymbol", ""},    {"bm", ""},           {"mathit", ""},
    {"operatorname", ""},  {"mathbb", ""},       {"mathcal", ""},
    {"phantom", ""},       {"cr", "\\\\"},
};

// Commands whose braced argument is text (words, units), not math.
constexpr const char* kTextCommands[] = {"text",   "textrm", "textnormal", "mathrm", "mbox", "textit",
                                         "textbf", "textsf", "texttt",     "emph",   "hbox"};

// Commands whose arguments the parser wants braced: \frac12 -> \frac{1}{2}.
int braced_arguments(std::string_view command) {
  if (command == "frac" || command == "binom") return 2;
  if (command == "sqrt") return 1;
  return 0;
}

class Normalizer {
 public:
  explicit Normalizer(std::string_view s) : s_(s) {}

  std::string run() {
    while (i_ < s_.size()) step();
    return std::move(out_);
  }

 private:
  void skip_spaces() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }

  // "^\circ", "^{\circ}", "^{ \circ }": degrees, dropped.
  bool at_degree() {
    size_t j = i_ + 1;
    while (j < s_.size() && s_[j] == ' ') ++j;
    bool brace = j < s_.size() && s_[j] == '{';
    if (brace) ++j;
    while (j < s_.size() && s_[j] == ' ') ++j;
    if (s_.compare(j, 5, "\\circ") != 0) return false;
    j += 5;
    if (j < s_.size() && is_letter(s_[j])) return false;
    while (j < s_.size() && s_[j] == ' ') ++j;
    if (brace) {
      if (j >= s_.size() || s_[j] != '}') return false;
      ++j;
    }
    skip_to_ = j;
    return true;
  }

  // One argument of \frac, \sqrt, ^, _: a braced group is left to the main loop (its content is
  // normalized like the rest); a single character or command is wrapped in braces.
  void argument() {
    skip_spaces();
    if (i_ >= s_.size()) return;
    if (s_[i_] == '{') return;  // the group follows; the caller returns to the main loop
    out_ += '{';
    if (s_[i_] == '\\') {
      size_t j = i_ + 1;
      while (j < s_.size() && is_letter(s_[j])) ++j;
      if (j == i_ + 1 && j < s_.size()) ++j;
      out_.append(s_.substr(i_, j - i_));
      i_ = j;
    } else {
      out_ += s_[i_++];
    }
    out_ += '}';
  }

  // \text{...}: its content as a text span (no nested commands or braces kept).
  void text_argument() {
    skip_spaces();
    if (i_ >= s_.size() || s_[i_] != '{') return;
    int depth = 0;
    const size_t start = out_.size();
    out_ += kTextOpen;
    for (; i_ < s_.size(); ++i_) {
      const char c = s_[i_];
      if (c == '{') {
        ++depth;
      } else if (c == '}') {
        if (--depth == 0) {
          ++i_;
          break;
        }
      } else if (c == '\\') {
        out_ += ' ';
        while (i_ + 1 < s_.size() && is_letter(s_[i_ + 1])) ++i_;
      } else if (c != kTextOpen && c != kTextClose) {
        out_ += c;
      }
    }
    // Nothing but spaces and percent signs ("77\text{ }", "35\text{ \%}"): spacing, as \% is outside.
    if (out_.find_first_not_of(" %", start + 1) == std::string::npos) {
      out_.resize(start);
      out_ += ' ';
      return;
    }
    out_ += kTextClose;
  }

  void command() {
    size_t j = i_ + 1;
    while (j < s_.size() && is_letter(s_[j])) ++j;
    if (j == i_ + 1) {  // \! \, \; \: \  \% \$ \{ \} \\ ...
      const char c = i_ + 1 < s_.size() ? s_[i_ + 1] : ' ';
      i_ += 2;
      if (c == '{' || c == '}' || c == '\\') {
        out_ += '\\';
        out_ += c;
      } else if (c == '&' || c == '#') {
        out_ += c;
      } else if (c == ',' || c == ' ' || c == ':' || c == ';' || c == '>') {
        out_ += ' ';
      }  // \! \% \$ and anything else: dropped
      return;
    }
    const std::string_view name = s_.substr(i_ + 1, j - i_ - 1);
    i_ = j;
    for (const char* t : kTextCommands) {
      if (name == t) {
        text_argument();
        return;
      }
    }
    std::string_view replacement;
    bool rewritten = false;
    for (const Rewrite& r : kRewrites) {
      if (name == r.command) {
        replacement = r.replacement;
        rewritten = true;
        break;
      }
    }
    if (!rewritten) {
      out_ += '\\';
      out_.append(name);
    } else {
      out_.append(replacement);
    }
    // The canonical name decides the arguments: \dfrac12 is \frac{1}{2}.
    const std::string_view canonical =
        rewritten && !replacement.empty() && replacement[0] == '\\' ? replacement.substr(1) : name;
    const int args = braced_arguments(canonical);
    if (args == 0) {
      if (!rewritten) out_ += ' ';  // "\pi r" stays two tokens
      return;
    }
    skip_spaces();
    if (canonical == "sqrt" && i_ < s_.size() && s_[i_] == '[') return;  // index, then the loop
    if (args == 1 || (i_ < s_.size() && s_[i_] != '{')) {
      argument();
      if (args == 2) argument();
      return;
    }
    // A braced first argument: the second is handled when the group closes at this depth.
    second_argument_at_.push_back(depth_);
  }

  // A digit group separator: "\\," "{,}" "\\ " or a space after a digit, before exactly three
  // digits ("10\\,000", "45{,}000", "1 000"). Returns its length, 0 when there is none.
  size_t group_separator() const {
    if (out_.empty() || out_.back() < '0' || out_.back() > '9') return 0;
    size_t n = 0;
    if (s_.compare(i_, 2, "\\,") == 0 || s_.compare(i_, 2, "\\ ") == 0)
      n = 2;
    else if (s_.compare(i_, 3, "{,}") == 0)
      n = 3;
    else if (s_[i_] == ' ')
      n = 1;
    if (n == 0) return 0;
    const size_t j = i_ + n;
    for (size_t k = 0; k < 3; ++k) {
      if (j + k >= s_.size() || s_[j + k] < '0' || s_[j + k] > '9') return 0;
    }
    if (j + 3 < s_.size() && s_[j + 3] >= '0' && s_[j + 3] <= '9') return 0;
    if (n == 1 && j + 3 < s_.size() && s_[j + 3] == '/') return 0;  // "3 125/1000": a mixed number
    return n;
  }

  void step() {
    const char c = s_[i_];
    if (const size_t n = group_separator()) {
      if (n == 3) out_ += ',';  // "45{,}000" -> "45,000", read as a thousands separator
      i_ += n;
      return;
    }
    if (c == '\\') {
      command();
      return;
    }
    if (c == '$' || c == '%' || c == kTextOpen || c == kTextClose) {
      ++i_;
      return;
    }
    if (c == '~' || c == '\n' || c == '\t' || c == '\r') {
      out_ += ' ';
      ++i_;
      return;
    }
    if (c == '^' || c == '_') {
      if (c == '^' && at_degree()) {
        i_ = skip_to_;
        return;
      }
      out_ += c;
      ++i_;
      argument();
      return;
    }
    if (c == '{') ++depth_;
    if (c == '}') {
      --depth_;
      out_ += c;
      ++i_;
      // The first argument of a \frac or \binom closed: brace its second if it is bare.
      if (!second_argument_at_.empty() && depth_ == second_argument_at_.back()) {
        second_argument_at_.pop_back();
        argument();
      }
      return;
    }
    out_ += c;
    ++i_;
  }

  std::string_view s_;
  size_t i_ = 0;
  size_t skip_to_ = 0;
  std::string out_;
  int depth_ = 0;
  std::vector<int> second_argument_at_;  // brace depths where a first argument closes
};

}  // namespace

std::string normalize_latex(std::string_view text) {
  const std::string ascii = map_confusables(text);
  return Normalizer(ascii).run();
}

std::string normalize_text(std::string_view text) {
  std::string out;
  bool space = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {  // a command name: dropped ("\text" around words)
      while (i + 1 < text.size() && is_letter(text[i + 1])) ++i;
      space = !out.empty();
      continue;
    }
    if (std::isalnum(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80) {
      if (space) out += ' ';
      space = false;
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      space = !out.empty();
    }
  }
  return out;
}

std::string normalize_symbols(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool escaped = i > 0 && text[i - 1] == '\\';  // \{ \} are set braces: kept
    if (c == ' ' || c == kTextOpen || c == kTextClose || ((c == '{' || c == '}') && !escaped)) continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  while (!out.empty() && out.back() == '.') out.pop_back();
  if (out.size() > 2 && out.front() == '(' && out.back() == ')' &&
      std::all_of(out.begin() + 1, out.end() - 1, [](char c) { return std::isalnum(static_cast<unsigned char>(c)); })) {
    out = out.substr(1, out.size() - 2);
  }
  return out;
}

}  // namespace unstuck::reward::math
