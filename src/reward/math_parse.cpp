// Recursive-descent parser for normalized math answers (tokens from math_lex.cpp). Recursion is bounded by
// kMaxMathDepth (each bracket, group, sign or power level counts), sums and products are n-ary
// nodes (a long chain stays flat), and the tree stops growing at kMaxMathNodes.
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "reward/math_syntax.h"

namespace unstuck::reward::math {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  MathTree run() {
    MathTree tree;
    const int root = answer();
    if (!failed_ && peek().kind == Tok::end && root >= 0) {
      tree.root = root;
      tree.nodes = std::move(nodes_);
    }
    return tree;
  }

 private:
  // Counts nesting on entry, uncounts on exit; past kMaxMathDepth the parse fails.
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxMathDepth) p_.failed_ = true;
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  const Token& peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  bool at(Tok k) const { return peek().kind == k; }
  bool accept(Tok k) {
    if (!at(k)) return false;
    ++pos_;
    return true;
  }
  int fail() {
    failed_ = true;
    return -1;
  }
  bool expect(Tok k) {
    if (accept(k)) return true;
    failed_ = true;
    return false;
  }

  int node(NodeKind kind, std::vector<int> kids = {}, std::string text = {}) {
    if (static_cast<int>(nodes_.size()) >= kMaxMathNodes) return fail();
    MathNode n;
    n.kind = kind;
    n.kids = std::move(kids);
    n.text = std::move(text);
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }

  bool separator_word() const {
    if (!at(Tok::word) && !at(Tok::text)) return false;
    const std::string w = normalize_text(peek().text);
    return w == "and" || w == "or" || w.empty();
  }
  bool at_separator() const { return at(Tok::comma) || at(Tok::semicolon) || separator_word(); }

  // answer := item ((',' | ';' | and | or) item)*
  int answer() {
    std::vector<int> items{item()};
    while (!failed_ && at_separator()) {
      ++pos_;
      while (separator_word()) ++pos_;  // ", and"
      items.push_back(item());
    }
    if (failed_) return -1;
    return items.size() == 1 ? items[0] : node(NodeKind::list, std::move(items));
  }

  // Words and text spans up to the next separator: a text answer ("Monday", "no solution").
  // Words are normalized (case, punctuation), anything else is kept: "\text{Area} + 1" and
  // "\text{Area} - 1" differ.
  int text_item() {
    std::string words;
    while (!at(Tok::end) && !at_separator()) {
      const bool word = at(Tok::word) || at(Tok::text) || at(Tok::variable);
      const std::string piece = word ? normalize_text(peek().text) : peek().text;
      if (!piece.empty()) words += (words.empty() ? "" : " ") + piece;
      ++pos_;
    }
    return node(NodeKind::text, {}, words);
  }

  // item := text | relation units?   relation := union (rel union)*
  int item() {
    if ((at(Tok::word) || at(Tok::text)) && !separator_word()) return text_item();
    int lhs = union_of();
    while (!failed_ && at(Tok::relation)) {
      const char rel = peek().text[0];
      ++pos_;
      const int rhs = union_of();
      lhs = node(NodeKind::relation, {lhs, rhs});
      if (lhs >= 0) nodes_[lhs].rel = rel;
    }
    if (failed_ || lhs < 0) return -1;
    // Units after the value: words or text spans, with powers and "per" slashes ("m/s^2").
    std::string units;
    while ((at(Tok::word) || at(Tok::text)) && !separator_word()) {
      units += (units.empty() ? "" : " ") + normalize_text(peek().text);
      ++pos_;
      while (at(Tok::caret) || at(Tok::slash) || at(Tok::number) || at(Tok::lgroup) || at(Tok::rgroup) ||
             (at(Tok::variable) && peek().space_before == false)) {
        units += peek().text;
        ++pos_;
      }
    }
    nodes_[lhs].units = units;
    return lhs;
  }

  int union_of() {
    int first = expression();
    if (!at(Tok::command) || peek().text != "cup") return first;
    std::vector<int> parts{first};
    while (!failed_ && at(Tok::command) && peek().text == "cup") {
      ++pos_;
      parts.push_back(expression());
    }
    return node(NodeKind::union_of, std::move(parts));
  }

  // expression := term (('+' | '-' | \pm) term)*
  int expression() {
    int first = term();
    std::vector<int> terms{first};
    while (!failed_) {
      if (accept(Tok::plus)) {
        terms.push_back(term());
      } else if (accept(Tok::minus)) {
        terms.push_back(node(NodeKind::neg, {term()}));
      } else if (at(Tok::command) && peek().text == "pm") {
        ++pos_;
        const int sum = terms.size() == 1 ? terms[0] : node(NodeKind::add, std::move(terms));
        terms = {node(NodeKind::plus_minus, {sum, term()})};
      } else {
        break;
      }
    }
    if (failed_) return -1;
    return terms.size() == 1 ? terms[0] : node(NodeKind::add, std::move(terms));
  }

  bool starts_primary() const {
    switch (peek().kind) {
      case Tok::number:
      case Tok::variable:
      case Tok::lparen:
      case Tok::lgroup:
        return true;
      case Tok::command: {
        const std::string& c = peek().text;
        return c != "cup" && c != "pm" && c != "end" && c != "dots" && c != "ldots" && c != "cdots";
      }
      default:
        return false;
    }
  }

  bool is_integer_literal(int n) const {
    return n >= 0 && nodes_[n].kind == NodeKind::number &&
           nodes_[n].text.find_first_not_of("0123456789") == std::string::npos;
  }

  // term := unary (('*' | '/' | implicit) unary)*, with mixed numbers 3\frac{1}{2} and 3 1/2.
  int term() {
    const size_t start = pos_;
    std::vector<int> factors{unary()};
    // A mixed number starts with an integer, or its negation: -2\frac{1}{2} is -(2 + 1/2).
    const bool negated = pos_ == start + 2 && factors[0] >= 0 && nodes_[factors[0]].kind == NodeKind::neg &&
                         is_integer_literal(nodes_[factors[0]].kids[0]);
    const bool bare_integer = (pos_ == start + 1 && is_integer_literal(factors[0])) || negated;
    const int whole = negated ? nodes_[factors[0]].kids[0] : factors[0];
    auto mixed = [&](int fraction) {
      const int sum = node(NodeKind::add, {whole, fraction});
      return negated ? node(NodeKind::neg, {sum}) : sum;
    };
    bool first = true;
    while (!failed_) {
      if (accept(Tok::star)) {
        factors.push_back(unary());
      } else if (accept(Tok::slash)) {
        factors.push_back(node(NodeKind::recip, {unary()}));
      } else if (starts_primary()) {
        const bool number_next = at(Tok::number);
        const size_t before = pos_;
        const int f = unary();
        if (failed_) return -1;
        const MathNode& n = nodes_[f];
        const bool mixed_frac = first && bare_integer && n.kind == NodeKind::mul && n.kids.size() == 2 &&
                                is_integer_literal(n.kids[0]) && nodes_[n.kids[1]].kind == NodeKind::recip &&
                                is_integer_literal(nodes_[n.kids[1]].kids[0]) && t_[before].kind == Tok::command &&
                                t_[before].text == "frac";
        if (mixed_frac) return mixed(f);
        if (number_next) {
          // "3 1/2": a mixed number; any other number after a number is unreadable ("12 34").
          if (!(first && bare_integer && is_integer_literal(f) && at(Tok::slash) && peek(1).kind == Tok::number)) {
            return fail();
          }
          ++pos_;
          const int den = unary();
          if (!is_integer_literal(den)) return fail();
          return mixed(node(NodeKind::mul, {f, node(NodeKind::recip, {den})}));
        }
        factors.push_back(f);
      } else {
        break;
      }
      first = false;
    }
    if (failed_) return -1;
    return factors.size() == 1 ? factors[0] : node(NodeKind::mul, std::move(factors));
  }

  int unary() {
    Depth d(*this);
    if (failed_) return -1;
    if (accept(Tok::minus)) return node(NodeKind::neg, {unary()});
    if (accept(Tok::plus)) return unary();
    if (at(Tok::command) && peek().text == "pm") {
      ++pos_;
      return node(NodeKind::plus_minus, {node(NodeKind::number, {}, "0"), unary()});
    }
    return power();
  }

  int power() {
    int base = postfix();
    if (failed_) return -1;
    if (accept(Tok::caret)) {
      const int exponent = at(Tok::lgroup) ? group() : unary();
      base = node(NodeKind::pow, {base, exponent});
      while (accept(Tok::bang)) base = node(NodeKind::factorial, {base});
    }
    return base;
  }

  int postfix() {
    int p = primary();
    while (!failed_ && accept(Tok::bang)) p = node(NodeKind::factorial, {p});
    return p;
  }

  // '{' expression '}'
  int group() {
    Depth d(*this);
    if (!expect(Tok::lgroup)) return -1;
    const int e = union_of();
    if (!expect(Tok::rgroup)) return -1;
    return e;
  }

  // A group as a value: {x} is x; {4, 11, 1} shows as the list 4, 11, 1 (LaTeX's braces group and
  // print nothing), read as that list, order-free.
  int braced_list() {
    Depth d(*this);
    if (!expect(Tok::lgroup)) return -1;
    std::vector<int> items{union_of()};
    while (!failed_ && accept(Tok::comma)) items.push_back(union_of());
    if (!expect(Tok::rgroup)) return -1;
    return items.size() == 1 ? items[0] : node(NodeKind::list, std::move(items));
  }

  // '(' or '[' items ')' or ']': a grouping (one item, matching brackets) or a tuple/interval.
  int bracketed() {
    Depth d(*this);
    const char open = at(Tok::lparen) ? '(' : '[';
    ++pos_;
    std::vector<int> items{union_of()};
    while (!failed_ && accept(Tok::comma)) items.push_back(union_of());
    if (failed_) return -1;
    char close = 0;
    if (accept(Tok::rparen))
      close = ')';
    else if (accept(Tok::rbracket))
      close = ']';
    else
      return fail();
    if (items.size() == 1) {
      if ((open == '(') != (close == ')')) return fail();
      return items[0];
    }
    const int b = node(NodeKind::bracket, std::move(items));
    if (b >= 0) {
      nodes_[b].open = open;
      nodes_[b].close = close;
    }
    return b;
  }

  int set() {
    Depth d(*this);
    ++pos_;
    std::vector<int> items;
    if (!at(Tok::rset)) {
      items.push_back(union_of());
      while (!failed_ && (accept(Tok::comma) || accept(Tok::semicolon))) {
        items.push_back(union_of());
      }
    }
    if (!expect(Tok::rset)) return -1;
    return node(NodeKind::set, std::move(items));
  }

  // \begin{pmatrix} a & b \\ c & d \end{pmatrix} (any matrix environment).
  int matrix() {
    Depth d(*this);
    auto environment = [&] {
      if (!expect(Tok::lgroup)) return;
      while (at(Tok::word) || at(Tok::variable)) ++pos_;
      expect(Tok::rgroup);
    };
    environment();
    std::vector<int> cells;
    int rows = 0;
    size_t width = 0, in_row = 0;
    while (!failed_) {
      cells.push_back(expression());
      ++in_row;
      if (accept(Tok::amp)) continue;
      const bool end_row = accept(Tok::rowsep);
      const bool end_matrix = at(Tok::command) && peek().text == "end";
      if (!end_row && !end_matrix) return fail();
      ++rows;
      if (width == 0) width = in_row;
      if (in_row != width) return fail();
      in_row = 0;
      if (at(Tok::command) && peek().text == "end") break;
    }
    if (failed_) return -1;
    ++pos_;
    environment();
    const int m = node(NodeKind::matrix, std::move(cells));
    if (m >= 0) nodes_[m].rows = rows;
    return m;
  }

  int function(const std::string& name) {
    int exponent = -1;
    int base = -1;
    for (int k = 0; k < 2; ++k) {
      if (accept(Tok::caret)) exponent = at(Tok::lgroup) ? group() : unary();
      if (accept(Tok::underscore)) base = at(Tok::lgroup) ? group() : primary();
    }
    const int arg = at(Tok::lparen) ? bracketed() : power();
    std::vector<int> kids{arg};
    if (base >= 0) kids.push_back(base);
    int f = node(NodeKind::func, std::move(kids), name);
    if (exponent >= 0) f = node(NodeKind::pow, {f, exponent});
    return f;
  }

  int primary() {
    Depth d(*this);
    if (failed_) return -1;
    const Token& tok = peek();
    switch (tok.kind) {
      case Tok::number:
        ++pos_;
        return node(NodeKind::number, {}, tok.text);
      case Tok::variable: {
        ++pos_;
        std::string name = tok.text;
        if (name == "e" && !at(Tok::underscore)) return node(NodeKind::euler);
        if (accept(Tok::underscore)) {  // x_1, x_{12}: part of the name
          name += '_';
          const bool braced = accept(Tok::lgroup);
          while (!at(Tok::end) && (braced ? !at(Tok::rgroup) : name.back() == '_')) {
            name += peek().text;
            ++pos_;
          }
          if (braced && !expect(Tok::rgroup)) return -1;
        }
        return node(NodeKind::variable, {}, name);
      }
      case Tok::lparen:
      case Tok::lbracket:
        return bracketed();
      case Tok::lgroup:
        return braced_list();
      case Tok::lset:
        return set();
      case Tok::bar: {
        ++pos_;
        const int inner = expression();
        if (!expect(Tok::bar)) return -1;
        return node(NodeKind::abs, {inner});
      }
      case Tok::command: {
        const std::string name = tok.text;
        ++pos_;
        if (name == "pi") return node(NodeKind::pi);
        if (name == "infty") return node(NodeKind::infinity);
        if (name == "emptyset") return node(NodeKind::empty_set);
        if (name == "frac") {
          const int num = group();
          const int den = group();
          return node(NodeKind::mul, {num, node(NodeKind::recip, {den})});
        }
        if (name == "binom") {
          const int n = group();
          return node(NodeKind::binom, {n, group()});
        }
        if (name == "sqrt") {
          int index = -1;
          if (accept(Tok::lbracket)) {
            index = expression();
            if (!expect(Tok::rbracket)) return -1;
          }
          const int radicand = group();
          return index >= 0 ? node(NodeKind::sqrt, {radicand, index}) : node(NodeKind::sqrt, {radicand});
        }
        if (name == "begin") return matrix();
        if (is_function(name)) return function(name);
        return fail();
      }
      default:
        return fail();
    }
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool failed_ = false;
  std::vector<MathNode> nodes_;
};

}  // namespace

MathTree parse_math(std::string_view normalized) {
  bool ok = true;
  std::vector<Token> tokens = lex(normalized, ok);
  if (!ok) return {};
  return Parser(std::move(tokens)).run();
}

}  // namespace unstuck::reward::math
