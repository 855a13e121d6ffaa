// Private: the math verifier's reading of an answer. normalize_latex() rewrites LaTeX and unicode
// into one small ASCII dialect (math_normalize.cpp); lex() cuts it into tokens (math_lex.cpp);
// parse_math() turns those into a tree of MathNodes (math_parse.cpp: expressions,
// brackets, sets, relations, matrices, text). All three are linear in the input; the parser's
// recursion is bounded by kMaxMathDepth and the tree by kMaxMathNodes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace unstuck::reward::math {

inline constexpr int kMaxMathDepth = 48;    // nesting of brackets, groups, powers, signs
inline constexpr int kMaxMathNodes = 2048;  // nodes of one parsed answer

// Text-mode spans (\text{...}, \mathrm{...}) are emitted between these two bytes.
inline constexpr char kTextOpen = '\x01';
inline constexpr char kTextClose = '\x02';

// LaTeX + unicode -> the parser's dialect: $ \left \right \! \, spacing dropped; \dfrac \tfrac ->
// \frac with braced arguments (\frac12 -> \frac{1}{2}, x^23 -> x^{2}3); \cdot \times -> *;
// \div -> /; ^\circ, degree signs, \% and % dropped; \$ dropped; unicode minus, dashes, x, ÷, π,
// √, ∞, ≤, ≥, ∪, ±, full-width digits and odd spaces mapped to their ASCII/LaTeX forms.
std::string normalize_latex(std::string_view text);

enum class NodeKind {
  number,    // text: decimal digits, optional '.', optional exponent "e-5"
  variable,  // text: name ("x", "x_1")
  pi,
  euler,  // e
  infinity,
  empty_set,
  add,    // kids summed
  mul,    // kids multiplied
  neg,    // -kids[0]
  recip,  // 1 / kids[0]
  pow,    // kids[0] ^ kids[1]
  func,   // text: sin cos tan sec csc cot ln log exp arcsin arccos arctan sinh cosh tanh; kids:
          // argument[, base for log]
  sqrt,   // kids: radicand[, index]
  factorial,
  binom,  // kids: n, k
  abs,
  plus_minus,  // kids[0] ± kids[1]
  bracket,     // open/close: ( [ with >= 2 items: tuple, point or interval
  set,         // \{ ... \} (order-free)
  union_of,    // \cup of intervals or sets
  matrix,      // rows x (kids.size() / rows)
  relation,    // rel: '=', '<', '>', 'l' (<=), 'g' (>=), 'n' (!=), 'i' (\in); kids: lhs, rhs
  list,        // comma/and/or separated items at the top level (order-free solutions)
  text,        // text: normalized words (lowercase, single spaces)
};

struct MathNode {
  NodeKind kind = NodeKind::number;
  std::string text;
  std::vector<int> kids;
  char open = 0, close = 0, rel = 0;
  int rows = 0;
  std::string units;  // unit words that followed this item ("cm", "dollars"), normalized
};

struct MathTree {
  std::vector<MathNode> nodes;
  int root = -1;  // -1: not readable
};

enum class Tok {
  end,
  number,
  variable,
  word,
  text,
  command,
  lparen,
  rparen,
  lbracket,
  rbracket,
  lgroup,
  rgroup,
  lset,
  rset,
  comma,
  semicolon,
  plus,
  minus,
  star,
  slash,
  caret,
  underscore,
  relation,
  bang,
  bar,
  amp,
  rowsep,
  other,
};

struct Token {
  Tok kind = Tok::end;
  std::string text;
  bool space_before = false;
};

// Tokens of normalized text; `ok` false when it holds a character math has no reading for.
std::vector<Token> lex(std::string_view normalized, bool& ok);

// sin cos tan sec csc cot ln log lg exp arcsin arccos arctan sinh cosh tanh.
bool is_function(std::string_view word);

// Parses normalized text (normalize_latex's output). root -1 when it is not readable as math.
MathTree parse_math(std::string_view normalized);

// Lowercase words of `text` (letters and digits), single-spaced; LaTeX commands and braces dropped.
std::string normalize_text(std::string_view text);

// `text` (normalize_latex's output) lowercased without spaces, braces, text-span markers and a
// final full stop, every other symbol kept; "(b)" around a lone word or letter is unwrapped. For
// answers compared as strings: "\text{(B)}" and "B" agree, "x+1" and "x-1" do not.
std::string normalize_symbols(std::string_view text);

}  // namespace unstuck::reward::math
