// Private: values of parsed math expressions. Exact rationals (GMP) while every step is
// rational and small; 64-bit-mantissa long doubles once a step is irrational (sqrt, pi, sin) or
// would grow an exact value past kMaxExactBits. Expressions with variables are evaluated at
// kMathPoints fixed pseudo-random points, the same for the gold answer and the completion.
#pragma once

#include <gmpxx.h>

#include <cstdint>
#include <vector>

#include "reward/math_syntax.h"

namespace unstuck::reward::math {

inline constexpr int kMathPoints = 6;                        // evaluation points for expressions with variables
inline constexpr size_t kMaxExactBits = 16384;               // an exact value larger than this turns approximate
inline constexpr long double kIrrationalTolerance = 1e-12L;  // relative, when either side is approximate

struct Num {
  enum Kind : uint8_t { exact, approx, pos_inf, neg_inf, invalid };
  Kind kind = invalid;
  mpq_class q;          // kind == exact
  long double x = 0.0;  // kind == approx (and a copy of q's value when exact)
};

// The value of `node` at evaluation point `point` (0..kMathPoints-1). Without variables every
// point gives the same value. `pm_sign` (+1 or -1) picks a branch of every \pm (0: \pm is invalid).
Num evaluate(const MathTree& tree, int node, int point, int pm_sign);

// True when `node`'s subtree holds a \pm.
bool has_plus_minus(const MathTree& tree, int node);

// True when `node`'s subtree mentions a variable.
bool has_variables(const MathTree& tree, int node);

// Equal values: exact rationals exactly (or within `tolerance` relative when it is > 0), infinities
// by sign, and anything approximate within max(tolerance, kIrrationalTolerance) relative.
bool same_value(const Num& a, const Num& b, double tolerance);

}  // namespace unstuck::reward::math
