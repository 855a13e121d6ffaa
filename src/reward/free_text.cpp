// free_text_answers(): the answers a completion without a box, tag or "####" offers, in the order
// math-verify's default extraction tries them ("final answer is X", "answer: X", then the
// expression ending last). One pass collects every expression of the text; the anchors then pick
// among them. No regex, no backtracking: each scan is linear, numbers are read at most
// kMaxNumberChars far.
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "unstuck/reward/answer.h"

namespace unstuck::reward {
namespace {

constexpr size_t kMaxNumberChars = 100;    // a longer digit run is not read as one number
constexpr size_t kFinalAnswerReach = 100;  // "final answer" ... " is" within this many characters
constexpr size_t kAnswerReach = 50;        // "answer" ... expression within this many characters
constexpr size_t kEqualsReach = 100;       // "answer ... = X": the '=' within this many characters

enum class SpanKind { math, expression, number };

struct Span {
  size_t begin = 0;  // where the span starts in the completion (its $ or first digit)
  size_t end = 0;    // one past its last character
  std::string text;  // what is graded: the content without $ or brackets
  SpanKind kind = SpanKind::math;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool at(std::string_view s, size_t i, std::string_view word) { return s.substr(i, word.size()) == word; }

std::string trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

// ---- math environments ----------------------------------------------------------------------------

// The next occurrence of a needle at or after a position that only grows: each character is
// searched once in all, so a text full of unclosed \( stays linear.
class NextOccurrence {
 public:
  NextOccurrence(std::string_view s, std::string_view needle) : s_(s), needle_(needle) {}
  size_t from(size_t pos) {
    if (next_ == std::string_view::npos && searched_) return next_;
    if (!searched_ || next_ < pos) {
      next_ = s_.find(needle_, pos);
      searched_ = true;
    }
    return next_;
  }

 private:
  std::string_view s_, needle_;
  size_t next_ = std::string_view::npos;
  bool searched_ = false;
};

struct Closers {
  explicit Closers(std::string_view s) : dollars(s, "$$"), bracket(s, "\\]"), paren(s, "\\)"), newline(s, "\n") {}
  NextOccurrence dollars, bracket, paren, newline;
};

// One math environment starting at i, or end == 0. Tried in math-verify's order: $$..$$, \[..\],
// $..$ (one line), \(..\) (one line), " [..] " (one line, no brackets inside), \frac{a}{b}.
Span math_at(std::string_view s, size_t i, Closers& closers) {
  const size_t n = s.size();
  const bool escaped = i > 0 && s[i - 1] == '\\';
  auto make = [&](size_t content_begin, size_t content_end, size_t end) {
    return Span{i, end, trimmed(s.substr(content_begin, content_end - content_begin)), SpanKind::math};
  };
  if (!escaped && at(s, i, "$$")) {  // the first "$$" after closes it, unless escaped
    const size_t close = closers.dollars.from(i + 3);
    if (close != std::string_view::npos && s[close - 1] != '\\') return make(i + 2, close, close + 2);
  }
  if (!escaped && at(s, i, "\\[")) {
    const size_t close = closers.bracket.from(i + 3);
    if (close != std::string_view::npos && s[close - 1] != '\\') return make(i + 2, close, close + 2);
  }
  if (s[i] == '$' && !escaped && !(i > 0 && is_digit(s[i - 1]))) {
    for (size_t k = i + 1; k < n; ++k) {
      if (s[k] == '\\' && k + 1 < n && s[k + 1] == '$') {
        ++k;  // an escaped dollar is content
      } else if (s[k] == '\n') {
        break;
      } else if (s[k] == '$') {
        if (k > i + 1) return make(i + 1, k, k + 1);
        break;
      }
    }
  }
  if (!escaped && at(s, i, "\\(")) {  // the first "\)" closes it if on the same line
    const size_t close = closers.paren.from(i + 2);
    const size_t line_end = closers.newline.from(i);
    if (close != std::string_view::npos && close > i + 2 && close < line_end) {
      return make(i + 2, close, close + 2);
    }
  }
  if (is_space(s[i]) && i + 1 < n && s[i + 1] == '[') {
    size_t k = i + 2;
    while (k < n && s[k] != '\n' && s[k] != '[' && s[k] != ']') ++k;
    if (k < n && s[k] == ']' && k > i + 2 && k + 1 < n && is_space(s[k + 1])) {
      Span span = make(i + 2, k, k + 2);
      span.begin = i + 1;
      return span;
    }
  }
  size_t k = i;
  if (k < n && s[k] == '-') ++k;
  if (at(s, k, "\\frac{")) {              // \frac{-1,5}{2}: simple numbers only
    auto simple_number = [&](size_t j) {  // -?\d+([.,]\d+)? then '}', or npos
      if (j < n && s[j] == '-') ++j;
      const size_t digits = j;
      while (j < n && is_digit(s[j])) ++j;
      if (j == digits) return std::string_view::npos;
      if (j + 1 < n && (s[j] == '.' || s[j] == ',') && is_digit(s[j + 1])) {
        ++j;
        while (j < n && is_digit(s[j])) ++j;
      }
      return j < n && s[j] == '}' ? j : std::string_view::npos;
    };
    const size_t num_end = simple_number(k + 6);
    if (num_end != std::string_view::npos && num_end + 1 < n && s[num_end + 1] == '{') {
      const size_t den_end = simple_number(num_end + 2);
      if (den_end != std::string_view::npos) return make(i, den_end + 1, den_end + 1);
    }
  }
  return {};
}

// ---- numbers and arithmetic expressions -------------------------------------------------------

// UTF-8 length of a multiplication or division sign (× ÷) at i, else 0.
size_t times_or_divide(std::string_view s, size_t i) { return at(s, i, "\xC3\x97") || at(s, i, "\xC3\xB7") ? 2 : 0; }
bool is_operator(std::string_view s, size_t i) {
  const char c = s[i];
  return c == '+' || c == '-' || c == '*' || c == '/' || c == '^' || c == '(' || c == ')' || times_or_divide(s, i) > 0;
}
// Length of an expression character at i (digit . space operator), else 0.
size_t expression_char(std::string_view s, size_t i) {
  const char c = s[i];
  if (is_digit(c) || c == '.' || is_space(c)) return 1;
  if (const size_t len = times_or_divide(s, i)) return len;
  return is_operator(s, i) ? 1 : 0;
}
bool ends_expression(std::string_view s, size_t i) {  // what may follow an arithmetic expression
  if (at(s, i, "**")) i += 2;
  if (i >= s.size()) return true;
  const char c = s[i];
  return c == '.' || c == ',' || c == ':' || c == ')' || c == '$' || is_space(c);
}

// Where a number or an expression may start: the text's start, or after a space, '=' or "**".
bool word_start(std::string_view s, size_t i) {
  if (i >= 2 && at(s, i - 2, "**")) i -= 2;
  return i == 0 || is_space(s[i - 1]) || s[i - 1] == '=';
}

// Length of a currency sign at i ($ € £ ¥ ₹ and the other one-character signs), else 0.
size_t currency(std::string_view s, size_t i) {
  if (s[i] == '$') return 1;
  for (const std::string_view sign :
       {"\xE2\x82\xAC", "\xC2\xA3", "\xC2\xA5", "\xE2\x82\xB9", "\xE2\x82\xBD", "\xE2\x82\xA9", "\xE2\x82\xAA"}) {
    if (at(s, i, sign)) return sign.size();
  }
  return 0;
}

// The number at i ("-1,234.5", "12.5", ".5", "42", then an optional '%'), or end == 0.
Span number_at(std::string_view s, size_t i) {
  const size_t n = s.size();
  const size_t limit = std::min(n, i + kMaxNumberChars);
  size_t k = i;
  if (k < limit && s[k] == '-') ++k;
  size_t end = 0;
  auto digits_from = [&](size_t j) {
    while (j < limit && is_digit(s[j])) ++j;
    return j;
  };
  // 1,234,567 or 1 234 567 (groups of three after one to three digits), then .5
  if (k < limit && s[k] >= '1' && s[k] <= '9') {
    const size_t lead = digits_from(k);
    if (lead - k <= 3) {
      size_t j = lead;
      size_t groups = 0;
      while (j + 3 < limit && (s[j] == ',' || s[j] == ' ') && is_digit(s[j + 1]) && is_digit(s[j + 2]) &&
             is_digit(s[j + 3]) && !(j + 4 < n && is_digit(s[j + 4]))) {
        j += 4;
        ++groups;
      }
      // A group of three followed by more digits ("1,2345") is not a separated number.
      if (groups > 0) {
        end = j;
        if (end + 1 < limit && s[end] == '.' && is_digit(s[end + 1])) end = digits_from(end + 1);
      }
    }
  }
  if (end == 0 && k < limit && is_digit(s[k])) {
    const size_t whole = digits_from(k);
    end = whole;
    if (whole + 1 < limit && (s[whole] == '.' || s[whole] == ',') && is_digit(s[whole + 1])) {
      end = digits_from(whole + 1);
    }
  }
  if (end == 0 && k == i && k + 1 < limit && s[k] == '.' && is_digit(s[k + 1])) end = digits_from(k + 1);
  if (end == 0) return {};
  std::string text(s.substr(i, end - i));
  size_t after = end;
  while (after < n && after - end < 4 && s[after] == ' ') ++after;
  if (after < n && s[after] == '%') {
    text += '%';
    end = after + 1;
  }
  return Span{i, end, text, SpanKind::number};
}

// Every arithmetic expression of the text: -?(?-?digit, expression characters, at least one
// operator followed by one more character, then what ends an expression. For each maximal run of
// expression characters only its leftmost start is kept (later starts give the same end).
void collect_expressions(std::string_view s, std::vector<Span>& out) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (!word_start(s, i)) {
      ++i;
      continue;
    }
    size_t k = i;
    if (k < n && s[k] == '-') ++k;
    if (k < n && s[k] == '(') ++k;
    if (k < n && s[k] == '-') ++k;
    if (k >= n || !is_digit(s[k])) {
      ++i;
      continue;
    }
    size_t run_end = k + 1;     // the maximal run of expression characters
    std::vector<size_t> stops;  // positions the expression may end at, in order
    while (run_end < n) {
      const size_t len = expression_char(s, run_end);
      if (len == 0) break;
      run_end += len;
      stops.push_back(run_end);
    }
    // The longest end with an operator before its last character and a valid follower.
    size_t first_operator = std::string_view::npos;
    for (size_t j = k + 1; j < run_end; j += std::max<size_t>(1, expression_char(s, j))) {
      if (is_operator(s, j)) {
        first_operator = j;
        break;
      }
    }
    size_t end = 0;
    for (size_t x = stops.size(); x-- > 0;) {
      const size_t e = stops[x];
      if (first_operator == std::string_view::npos || e <= first_operator + 1) break;
      size_t last = e;  // an expression does not end in an operator other than ')'
      while (last > i && (is_space(s[last - 1]) || s[last - 1] == '.')) --last;
      const bool dangling =
          last > i && s[last - 1] != ')' && expression_char(s, last - 1) == 1 && !is_digit(s[last - 1]);
      const bool dangling_sign = last >= 2 && times_or_divide(s, last - 2) > 0;
      if (ends_expression(s, e) && !dangling && !dangling_sign) {
        end = e;
        break;
      }
    }
    if (end > 0) {
      std::string text = trimmed(s.substr(i, end - i));
      while (!text.empty() && (text.back() == '.' || is_space(text.back()))) text.pop_back();
      if (!text.empty()) out.push_back(Span{i, i + text.size(), text, SpanKind::expression});
    }
    i = std::max(i + 1, run_end);  // later starts in this run end at the same place
  }
}

std::vector<Span> collect_spans(std::string_view s) {
  std::vector<Span> spans;
  Closers closers(s);
  for (size_t i = 0; i < s.size();) {  // math environments, left to right, not overlapping
    Span span = math_at(s, i, closers);
    if (span.end == 0) {
      ++i;
      continue;
    }
    i = span.end;
    if (!span.text.empty()) spans.push_back(std::move(span));
  }
  collect_expressions(s, spans);
  for (size_t i = 0; i < s.size(); ++i) {
    if (!word_start(s, i)) continue;
    const size_t sign = currency(s, i);
    Span span = number_at(s, i + sign);
    if (span.end == 0) continue;
    span.begin = i;
    spans.push_back(std::move(span));
  }
  return spans;
}

// ---- anchors ------------------------------------------------------------------------------------

bool equal_ignoring_case(std::string_view s, size_t i, std::string_view word) {
  if (i + word.size() > s.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(s[i + k])) != word[k]) return false;
  }
  return true;
}

std::vector<size_t> occurrences(std::string_view s, std::string_view word) {
  std::vector<size_t> found;
  for (size_t i = 0; i + word.size() <= s.size(); ++i) {
    if (equal_ignoring_case(s, i, word)) found.push_back(i);
  }
  return found;
}

bool newline_between(std::string_view s, size_t from, size_t to) {
  return from < to && s.substr(from, to - from).find('\n') != std::string_view::npos;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The spans ordered by where they start, for the anchors' look-ups (each a binary search).
class SpansByStart {
 public:
  explicit SpansByStart(const std::vector<Span>& spans) {
    for (const Span& span : spans) order_.push_back(&span);
    std::stable_sort(order_.begin(), order_.end(), [](const Span* a, const Span* b) { return a->begin < b->begin; });
  }

  // The spans starting in [from, to], in order of their start.
  std::pair<std::vector<const Span*>::const_iterator, std::vector<const Span*>::const_iterator> in(size_t from,
                                                                                                   size_t to) const {
    auto first = std::lower_bound(order_.begin(), order_.end(), from,
                                  [](const Span* span, size_t pos) { return span->begin < pos; });
    auto last = std::upper_bound(order_.begin(), order_.end(), to,
                                 [](size_t pos, const Span* span) { return pos < span->begin; });
    return {first, std::max(first, last)};
  }

  // The longest span starting at `pos` that `accept` takes, or nullptr.
  template <typename Accept>
  const Span* longest_at(size_t pos, Accept accept) const {
    const Span* best = nullptr;
    for (auto [it, end] = in(pos, pos); it != end; ++it) {
      if (accept(**it) && (best == nullptr || (*it)->end > best->end)) best = *it;
    }
    return best;
  }

 private:
  std::vector<const Span*> order_;
};

bool followed_by_equals(std::string_view s, const Span& span) {
  const size_t after = skip_spaces(s, span.end);
  return after < s.size() && s[after] == '=';
}

// "final answer ... is X": the last such anchor with an expression right after "is".
const Span* after_final_answer(std::string_view s, const SpansByStart& spans) {
  const std::vector<size_t> anchors = occurrences(s, "final answer");
  for (size_t a = anchors.size(); a-- > 0;) {
    const size_t from = anchors[a] + 12;
    for (size_t k = from; k < s.size() && k <= from + kFinalAnswerReach; ++k) {
      if (!is_space(s[k])) continue;
      size_t j = skip_spaces(s, k);
      if (!equal_ignoring_case(s, j, "is")) continue;
      j += 2;
      if (j < s.size() && s[j] == ':') ++j;
      j = skip_spaces(s, j);
      if (const Span* span = spans.longest_at(j, [](const Span&) { return true; })) return span;
    }
  }
  return nullptr;
}

// "answer: X" (colon) or "answer ... X": the last anchor that has an expression after it. For an
// anchor, the number or expression after the last '=' of its line within reach (outside math
// environments: "answer: 2 + 3 = 5"), else the first expression that starts within reach (a
// number or arithmetic expression on the anchor's line, not itself followed by '='). math-verify
// takes the match that ends last instead, so "Answer: $4y-12$ (step 2)" is 2 there; the answer
// the sentence gives is the first one.
const Span* after_answer(std::string_view s, const SpansByStart& spans, bool colon) {
  const std::vector<size_t> anchors = occurrences(s, "answer");
  for (size_t a = anchors.size(); a-- > 0;) {
    size_t from = anchors[a] + 6;
    if (colon) {
      if (from >= s.size() || s[from] != ':') continue;
      ++from;
    }
    const size_t reach_end = std::min(s.size(), from + kEqualsReach + 1);
    const size_t newline = s.substr(0, reach_end).find('\n', from);
    const size_t line_end = newline == std::string_view::npos ? reach_end : newline;
    const Span* first = nullptr;
    for (auto [it, end] = spans.in(from, from + kAnswerReach); it != end && first == nullptr; ++it) {
      const Span& span = **it;
      if (span.kind == SpanKind::math || (!newline_between(s, from, span.begin - 1) && !followed_by_equals(s, span))) {
        first = &span;
      }
    }
    auto inside_math = [&](size_t q) {
      for (auto [it, end] = spans.in(from, q); it != end; ++it) {
        if ((*it)->kind == SpanKind::math && (*it)->end > q) return true;
      }
      return false;
    };
    for (size_t q = line_end; q-- > from;) {
      if (s[q] != '=' || (first != nullptr && q < first->end) || inside_math(q)) continue;
      const Span* after = spans.longest_at(skip_spaces(s, q + 1), [&](const Span& span) {
        return span.kind != SpanKind::math && !followed_by_equals(s, span);
      });
      if (after != nullptr) return after;
    }
    if (first != nullptr) return first;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> free_text_answers(std::string_view completion) {
  std::vector<Span> spans = collect_spans(completion);
  const SpansByStart by_start(spans);
  std::vector<std::string> answers;
  auto add = [&](const Span* span) {
    if (span == nullptr || answers.size() >= kMaxFreeTextAnswers) return;
    if (std::find(answers.begin(), answers.end(), span->text) == answers.end()) {
      answers.push_back(span->text);
    }
  };
  add(after_final_answer(completion, by_start));
  add(after_answer(completion, by_start, /*colon=*/true));
  add(after_answer(completion, by_start, /*colon=*/false));
  std::vector<const Span*> last_first;
  for (const Span& span : spans) last_first.push_back(&span);
  std::stable_sort(last_first.begin(), last_first.end(), [](const Span* a, const Span* b) {
    if (a->end != b->end) return a->end > b->end;
    if (a->begin != b->begin) return a->begin < b->begin;
    return static_cast<int>(a->kind) < static_cast<int>(b->kind);
  });
  for (const Span* span : last_first) {
    if (answers.size() >= kMaxFreeTextAnswers) break;
    add(span);
  }
  return answers;
}

}  // namespace unstuck::reward
