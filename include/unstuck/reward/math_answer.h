// Mathematical equivalence of a final answer and a gold answer, both written in LaTeX or plain
// text: numbers (exact rationals), surds, pi, algebraic expressions, intervals, sets, tuples,
// lists of solutions, matrices, equations and \text{} answers. Pure functions with bounded work;
// the rules and their order are documented in docs/TASKS.md ("math").
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "unstuck/reward/answer.h"

namespace unstuck::reward {

// Strictness of `reward.verifier: math` (reward.math.*).
struct MathOptions {
  double numeric_tolerance = 0.0;  // relative tolerance between rational answers (0: exact)
  bool units_optional = true;      // unit words after a number may be dropped or added
  bool answer_is = true;           // fall back to "the answer is X" when no configured format is found

  template <class V>
  void visit(V& v) {
    v("numeric_tolerance", numeric_tolerance,
      "relative tolerance between two rational answers (0: exact, so 0.10000001 != 0.1); "
      "irrational values always compare at 1e-12 relative");
    v("units_optional", units_optional,
      "unit words after a number (5 cm, 3 dollars) may be dropped or added; false: they must match");
    v("answer_is", answer_is, "math: after reward.answer_formats, read the answer from the last \"the answer is X\"");
  }
};

enum class MathMatch {
  equal,       // same mathematical object
  different,   // both readable, not the same
  unreadable,  // the answer (or the gold answer) cannot be read as math nor compared as text
};

inline constexpr std::array<std::pair<MathMatch, const char*>, 3> kMathMatchNames{{
    {MathMatch::equal, "equal"},
    {MathMatch::different, "different"},
    {MathMatch::unreadable, "unreadable"},
}};
constexpr const auto& enum_names(MathMatch) { return kMathMatchNames; }

// Compares `answer` with `gold`. Text answers ("Monday", "\text{no solution}") compare by their
// lowercase words; a gold answer that is not readable as math, and text against math, compare as
// strings without spaces, braces and case (symbols kept). Never throws.
//   ("\frac12", "0.5") -> equal;  ("2x+3", "3+2x") -> equal;  ("0.1", "0.10000001") -> different
//   ("[2,\infty)", "[2, \infty)") -> equal;  ("(1,2]", "[1,2)") -> different;  ("5", "x = 5") -> equal
MathMatch compare_math_answers(std::string_view gold, std::string_view answer, const MathOptions& options = {});

// The answer the math verifier reads: the first of `order` found, refined (an answer tag that
// holds a \boxed{} gives the box's content; one that says "the answer is X" gives X), then, with
// options.answer_is, the last "the answer is X" of the completion (X up to the end of its line
// or sentence). nullopt when none is found.
std::optional<std::string> extract_math_answer(std::string_view completion, const std::vector<AnswerFormat>& order,
                                               const MathOptions& options = {});

}  // namespace unstuck::reward
