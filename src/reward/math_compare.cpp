// compare_math_answers() and extract_math_answer(): the gold answer and the completion's answer
// are normalized, parsed and compared structure by structure (relations, lists and sets order-free,
// brackets and matrices in order, text by words); expressions compare by value at shared points.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reward/math_syntax.h"
#include "reward/math_value.h"
#include "unstuck/reward/math_answer.h"

namespace unstuck::reward {
namespace {

using math::MathNode;
using math::MathTree;
using math::NodeKind;
using math::Num;

constexpr size_t kMaxCompareChars = 4096;  // longer inputs are unreadable (callers cap lower)

// An expression and the branch of its \pm (0: none).
struct Element {
  int node;
  int sign;
};

class Comparer {
 public:
  Comparer(const MathTree& gold, const MathTree& answer, const MathOptions& options)
      : trees_{&gold, &answer}, options_(options) {}

  bool same(int g, int a) { return same_element({g, 0}, {a, 0}); }

  // An answer that is a number with no value: 1/0, 10^{10^{10}} (beyond what is evaluated).
  bool undefined_number(int a) {
    const MathNode& A = node(1, a);
    switch (A.kind) {
      case NodeKind::list:
      case NodeKind::set:
      case NodeKind::bracket:
      case NodeKind::union_of:
      case NodeKind::matrix:
      case NodeKind::relation:
      case NodeKind::text:
      case NodeKind::empty_set:
        return false;
      default:
        break;
    }
    if (math::has_plus_minus(*trees_[1], a) || math::has_variables(*trees_[1], a)) return false;
    return values(1, {a, 0})[0].kind == Num::invalid;
  }

 private:
  const MathNode& node(int side, int n) const { return trees_[side]->nodes[static_cast<size_t>(n)]; }

  // The values of an expression at every evaluation point (one point when it has no variables).
  const std::vector<Num>& values(int side, Element e) {
    auto& cache = cache_[side];
    const auto key = std::make_pair(e.node, e.sign);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    std::vector<Num> v;
    const int points = math::has_variables(*trees_[side], e.node) ? math::kMathPoints : 1;
    for (int p = 0; p < points; ++p) v.push_back(math::evaluate(*trees_[side], e.node, p, e.sign));
    return cache.emplace(key, std::move(v)).first->second;
  }

  // Evaluation at shared points: equal at every point where both are defined, with at least 3
  // such points when variables are involved (Schwartz-Zippel: docs/TASKS.md states the odds).
  bool same_expression(Element g, Element a) {
    const std::vector<Num>& vg = values(0, g);
    const std::vector<Num>& va = values(1, a);
    if (vg.size() == 1 && va.size() == 1) {
      return math::same_value(vg[0], va[0], options_.numeric_tolerance);
    }
    int defined = 0;
    for (int p = 0; p < math::kMathPoints; ++p) {
      const Num& x = vg[vg.size() == 1 ? 0 : static_cast<size_t>(p)];
      const Num& y = va[va.size() == 1 ? 0 : static_cast<size_t>(p)];
      const bool dx = x.kind != Num::invalid, dy = y.kind != Num::invalid;
      if (!dx && !dy) continue;
      if (dx != dy || !math::same_value(x, y, options_.numeric_tolerance)) return false;
      ++defined;
    }
    return defined >= 3;
  }

  // The members of a list or set, each \pm member split into its two branches.
  std::vector<Element> members(int side, int n) {
    const MathNode& m = node(side, n);
    std::vector<int> items;
    if (m.kind == NodeKind::list || m.kind == NodeKind::set) {
      items = m.kids;
    } else if (m.kind != NodeKind::empty_set) {
      items = {n};
    }
    std::vector<Element> out;
    for (const int i : items) {
      if (math::has_plus_minus(*trees_[side], i)) {
        out.push_back({i, +1});
        out.push_back({i, -1});
      } else {
        out.push_back({i, 0});
      }
    }
    return out;
  }

  // Order-free: every member of each side equals some member of the other (set semantics).
  bool same_members(int g, int a) {
    const std::vector<Element> mg = members(0, g);
    const std::vector<Element> ma = members(1, a);
    if (mg.empty() || ma.empty()) return mg.empty() && ma.empty();
    std::vector<char> matched(ma.size(), 0);
    for (const Element& x : mg) {
      bool found = false;
      for (size_t j = 0; j < ma.size(); ++j) {
        if (same_element(x, ma[j])) {
          matched[j] = 1;
          found = true;
        }
      }
      if (!found) return false;
    }
    for (const char m : matched) {
      if (!m) return false;
    }
    return true;
  }

  bool same_in_order(const std::vector<int>& g, const std::vector<int>& a) {
    if (g.size() != a.size()) return false;
    for (size_t i = 0; i < g.size(); ++i) {
      if (!same(g[i], a[i])) return false;
    }
    return true;
  }

  static bool is_collection(NodeKind k) { return k == NodeKind::list || k == NodeKind::set; }

  // x = 5, x \in [1, 2), (x, y) = (1, 2), f(x) = 1: the right side, when the left is a lone
  // variable, a tuple of variables, or a function of variables (a product of variables, as f(x)
  // parses); f(2) = -8 is not a label.
  int value_of_assignment(int side, int n) const {
    const MathNode& m = node(side, n);
    if (m.kind != NodeKind::relation || (m.rel != '=' && m.rel != 'i')) return -1;
    const MathNode& lhs = node(side, m.kids[0]);
    bool variables = lhs.kind == NodeKind::variable;
    if (lhs.kind == NodeKind::bracket || (lhs.kind == NodeKind::mul && m.rel == '=')) {
      variables = true;
      for (const int k : lhs.kids) variables = variables && node(side, k).kind == NodeKind::variable;
    }
    return variables ? m.kids[1] : -1;
  }

  // The set an inequality in one variable or an interval stands for: its ends (-1: unbounded) and
  // whether each is open. x < a, x \le a, a > x, a < x \le b, b \ge x > a; (a, b], [a, \infty).
  struct Range {
    int lo = -1, hi = -1;
    bool lo_open = true, hi_open = true, ok = false;
  };
  static bool ascending(char rel) { return rel == '<' || rel == 'l'; }
  static bool descending(char rel) { return rel == '>' || rel == 'g'; }
  bool is_variable(int side, int n) const { return node(side, n).kind == NodeKind::variable; }
  bool is_infinity(int side, int n, bool negative) const {
    const MathNode& m = node(side, n);
    if (negative) return m.kind == NodeKind::neg && node(side, m.kids[0]).kind == NodeKind::infinity;
    return m.kind == NodeKind::infinity;
  }

  Range range_of_inequality(int side, int n) const {
    const MathNode& m = node(side, n);
    Range r;
    if (m.kind != NodeKind::relation || !(ascending(m.rel) || descending(m.rel))) return r;
    const MathNode& left = node(side, m.kids[0]);
    if (left.kind == NodeKind::relation) {  // a r x r b
      if (!is_variable(side, left.kids[1]) || node(side, left.kids[0]).kind == NodeKind::relation) return r;
      if (ascending(left.rel) && ascending(m.rel)) {
        r = {left.kids[0], m.kids[1], left.rel == '<', m.rel == '<', true};
      } else if (descending(left.rel) && descending(m.rel)) {
        r = {m.kids[1], left.kids[0], m.rel == '>', left.rel == '>', true};
      }
      return r;
    }
    const bool x_left = is_variable(side, m.kids[0]), x_right = is_variable(side, m.kids[1]);
    if (x_left == x_right) return r;                   // no variable side, or two
    const char rel = x_left ? m.rel : flipped(m.rel);  // as "x rel bound"
    const int bound = x_left ? m.kids[1] : m.kids[0];
    if (ascending(rel))
      r.hi = bound, r.hi_open = rel == '<';
    else
      r.lo = bound, r.lo_open = rel == '>';
    r.ok = true;
    return r;
  }

  Range range_of_interval(int side, int n) const {
    const MathNode& m = node(side, n);
    Range r;
    if (m.kind != NodeKind::bracket || m.kids.size() != 2) return r;
    r.lo = is_infinity(side, m.kids[0], true) ? -1 : m.kids[0];
    r.hi = is_infinity(side, m.kids[1], false) ? -1 : m.kids[1];
    r.lo_open = m.open == '(';
    r.hi_open = m.close == ')';
    r.ok = true;
    return r;
  }

  bool same_range(const Range& g, const Range& a) {
    const auto same_end = [&](int eg, bool og, int ea, bool oa) {
      if (eg < 0 || ea < 0) return eg < 0 && ea < 0;
      return og == oa && same(eg, ea);
    };
    return g.ok && a.ok && same_end(g.lo, g.lo_open, a.lo, a.lo_open) && same_end(g.hi, g.hi_open, a.hi, a.hi_open);
  }

  // A gold inequality against an interval answer (x > 3 and (3, \infty)); a gold x \ne a against
  // (-\infty, a) \cup (a, \infty). The other way round is not taken, as math-verify does not.
  bool inequality_as_set(int g, int a) {
    const MathNode& G = node(0, g);
    const MathNode& A = node(1, a);
    if (A.kind == NodeKind::bracket) return same_range(range_of_inequality(0, g), range_of_interval(1, a));
    if (G.rel != 'n' || A.kind != NodeKind::union_of || A.kids.size() != 2) return false;
    const bool x_left = is_variable(0, G.kids[0]), x_right = is_variable(0, G.kids[1]);
    if (x_left == x_right) return false;
    const int point = x_left ? G.kids[1] : G.kids[0];
    for (int first = 0; first < 2; ++first) {  // either part first
      const Range below = range_of_interval(1, A.kids[static_cast<size_t>(first)]);
      const Range above = range_of_interval(1, A.kids[static_cast<size_t>(1 - first)]);
      if (below.ok && above.ok && below.lo < 0 && below.hi >= 0 && below.hi_open && above.hi < 0 && above.lo >= 0 &&
          above.lo_open && same(point, below.hi) && same(point, above.lo))
        return true;
    }
    return false;
  }

  // Two equations with the same solutions as polynomials would have them: lhs - rhs of one is a
  // non-zero constant times lhs - rhs of the other at every evaluation point (2x + 2y = 4 and
  // x + y = 2, 24 = 6x - 9y and 2x - 3y = 8), with variables on both.
  bool same_equation_up_to_factor(int g, int a) {
    const MathNode& G = node(0, g);
    const MathNode& A = node(1, a);
    if (G.rel != '=' || A.rel != '=' || !math::has_variables(*trees_[0], g) || !math::has_variables(*trees_[1], a))
      return false;
    const std::vector<Num>& gl = values(0, {G.kids[0], 0});
    const std::vector<Num>& gr = values(0, {G.kids[1], 0});
    const std::vector<Num>& al = values(1, {A.kids[0], 0});
    const std::vector<Num>& ar = values(1, {A.kids[1], 0});
    const auto at = [](const std::vector<Num>& v, int p) -> const Num& { return v[v.size() == 1 ? 0 : size_t(p)]; };
    const auto finite = [](const Num& x) { return x.kind == Num::exact || x.kind == Num::approx; };
    long double factor = 0;
    int defined = 0;
    for (int p = 0; p < math::kMathPoints; ++p) {
      const Num &a1 = at(gl, p), &a2 = at(gr, p), &b1 = at(al, p), &b2 = at(ar, p);
      if (!finite(a1) || !finite(a2) || !finite(b1) || !finite(b2)) return false;
      const long double dg = a1.x - a2.x, da = b1.x - b2.x;
      const long double scale = std::max({std::fabs(a1.x), std::fabs(a2.x), std::fabs(b1.x), std::fabs(b2.x), 1.0L});
      const long double eps = 1e-9L * scale;
      if (std::fabs(da) <= eps || std::fabs(dg) <= eps) {
        if (std::fabs(da) <= eps && std::fabs(dg) <= eps) continue;  // a root of both
        return false;
      }
      const long double f = dg / da;
      if (defined > 0 && std::fabs(f - factor) > 1e-9L * std::max(std::fabs(factor), 1.0L)) return false;
      factor = f;
      ++defined;
    }
    return defined >= 3;
  }

  static char flipped(char rel) {
    switch (rel) {
      case '<':
        return '>';
      case '>':
        return '<';
      case 'l':
        return 'g';
      case 'g':
        return 'l';
      default:
        return rel;
    }
  }

  bool same_element(Element eg, Element ea) {
    const int g = eg.node, a = ea.node;
    const MathNode& G = node(0, g);
    const MathNode& A = node(1, a);
    if (!options_.units_optional && G.units != A.units) return false;
    const bool rg = G.kind == NodeKind::relation, ra = A.kind == NodeKind::relation;
    if (rg && ra) {
      const bool direct = G.rel == A.rel && same(G.kids[0], A.kids[0]) && same(G.kids[1], A.kids[1]);
      if (direct ||
          (G.rel == flipped(A.rel) && G.rel != 'i' && same(G.kids[0], A.kids[1]) && same(G.kids[1], A.kids[0])))
        return true;
      if (same_range(range_of_inequality(0, g), range_of_inequality(1, a))) return true;  // 3 < x, x > 3 < 9 ...
      return same_equation_up_to_factor(g, a);
    }
    if (rg && inequality_as_set(g, a)) return true;
    if (rg || ra) {  // "x = 5" against a bare 5, either way round
      const int v = rg ? value_of_assignment(0, g) : value_of_assignment(1, a);
      if (v < 0) return false;
      return rg ? same_element({v, eg.sign}, ea) : same_element(eg, {v, ea.sign});
    }
    if (G.kind == NodeKind::text || A.kind == NodeKind::text) {
      return G.kind == A.kind && G.text == A.text;
    }
    const bool pm_g = eg.sign == 0 && math::has_plus_minus(*trees_[0], g);
    const bool pm_a = ea.sign == 0 && math::has_plus_minus(*trees_[1], a);
    if (is_collection(G.kind) || is_collection(A.kind) || pm_g || pm_a || G.kind == NodeKind::empty_set ||
        A.kind == NodeKind::empty_set) {
      // A one-member set against a bare value ({3} and 3) compares the member.
      return same_members(g, a);
    }
    if (G.kind == NodeKind::bracket || A.kind == NodeKind::bracket) {
      return G.kind == A.kind && G.open == A.open && G.close == A.close && same_in_order(G.kids, A.kids);
    }
    if (G.kind == NodeKind::union_of || A.kind == NodeKind::union_of) {
      if (G.kind != A.kind) return false;
      std::vector<char> used(A.kids.size(), 0);
      if (G.kids.size() != A.kids.size()) return false;
      for (const int part : G.kids) {  // order-free, each part used once
        bool found = false;
        for (size_t j = 0; j < A.kids.size() && !found; ++j) {
          if (!used[j] && same(part, A.kids[j])) used[j] = found = true;
        }
        if (!found) return false;
      }
      return true;
    }
    if (G.kind == NodeKind::matrix || A.kind == NodeKind::matrix) {
      return G.kind == A.kind && G.rows == A.rows && same_in_order(G.kids, A.kids);
    }
    return same_expression(eg, ea);
  }

  const MathTree* trees_[2];
  const MathOptions& options_;
  std::map<std::pair<int, int>, std::vector<Num>> cache_[2];
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A case-insensitive search for the last "answer is" in `s`.
size_t rfind_answer_is(std::string_view s) {
  constexpr std::string_view kPhrase = "answer is";
  if (s.size() < kPhrase.size()) return std::string_view::npos;
  for (size_t i = s.size() - kPhrase.size() + 1; i-- > 0;) {
    bool match = true;
    for (size_t k = 0; k < kPhrase.size() && match; ++k) {
      match = std::tolower(static_cast<unsigned char>(s[i + k])) == kPhrase[k];
    }
    if (match) return i;
  }
  return std::string_view::npos;
}

// "... the answer is $\frac12$." -> "$\frac12$": to the end of the line, without ':' before it
// and the sentence's full stop after it.
std::optional<std::string> after_answer_is(std::string_view s) {
  const size_t at = rfind_answer_is(s);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = s.substr(at + 9);
  rest = rest.substr(0, rest.find('\n'));
  rest = trim(rest);
  while (!rest.empty() && rest.front() == ':') rest = trim(rest.substr(1));
  while (!rest.empty() && (rest.back() == '.' || rest.back() == '!')) rest = trim(rest.substr(0, rest.size() - 1));
  if (rest.empty()) return std::nullopt;
  return std::string(rest);
}

}  // namespace

MathMatch compare_math_answers(std::string_view gold, std::string_view answer, const MathOptions& options) {
  if (gold.size() > kMaxCompareChars || answer.size() > kMaxCompareChars) {
    return MathMatch::unreadable;
  }
  const std::string g = math::normalize_latex(gold);
  const std::string a = math::normalize_latex(answer);
  const MathTree tg = math::parse_math(g);
  const MathTree ta = math::parse_math(a);
  auto same_string = [&] {
    return math::normalize_symbols(g) == math::normalize_symbols(a) ? MathMatch::equal : MathMatch::different;
  };
  if (tg.root < 0) {  // not math: compared as a string, symbols kept
    return math::normalize_symbols(g).empty() ? MathMatch::unreadable : same_string();
  }
  const bool text_gold = tg.nodes[static_cast<size_t>(tg.root)].kind == NodeKind::text;
  const bool text_answer = ta.root >= 0 && ta.nodes[static_cast<size_t>(ta.root)].kind == NodeKind::text;
  if (text_gold && text_answer) {  // "Monday" and "\text{monday}": the same words
    const MathNode& G = tg.nodes[static_cast<size_t>(tg.root)];
    const MathNode& A = ta.nodes[static_cast<size_t>(ta.root)];
    return G.text == A.text ? MathMatch::equal : MathMatch::different;
  }
  if (text_gold || text_answer) return same_string();  // "\text{(B)}" and "B"
  if (ta.root < 0) return MathMatch::unreadable;
  Comparer comparer(tg, ta, options);
  if (comparer.same(tg.root, ta.root)) return MathMatch::equal;
  return comparer.undefined_number(ta.root) ? MathMatch::unreadable : MathMatch::different;
}

std::optional<std::string> extract_math_answer(std::string_view completion, const std::vector<AnswerFormat>& order,
                                               const MathOptions& options) {
  for (const AnswerFormat format : order) {
    if (format == AnswerFormat::last_expression) {
      // math-verify's any_match: the first of the free text's answers that reads as math.
      for (std::string& answer : free_text_answers(completion)) {
        if (answer.size() > kMaxCompareChars) continue;
        if (math::parse_math(math::normalize_latex(answer)).root >= 0) return std::move(answer);
      }
      continue;
    }
    std::optional<std::string> answer = extract_answer(completion, format);
    if (!answer) continue;
    if (format == AnswerFormat::answer_tag) {
      // <answer>... \boxed{72}</answer> and <answer>The answer is 72.</answer>.
      if (auto boxed = extract_answer(*answer, AnswerFormat::boxed)) return boxed;
      if (auto stated = after_answer_is(*answer)) return stated;
    }
    return answer;
  }
  if (options.answer_is) return after_answer_is(completion);
  return std::nullopt;
}

}  // namespace unstuck::reward
