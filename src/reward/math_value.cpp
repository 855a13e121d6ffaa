// Evaluation of math expression trees to exact rationals or long doubles, with every exact step
// checked against kMaxExactBits and every exponent, factorial and binomial bounded, so no answer
// (10^{10^{10}}, 1000!!!) can take long or allocate much.
#include "reward/math_value.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace unstuck::reward::math {
namespace {

Num invalid() { return Num{}; }

size_t mpz_sizeinbits(mpz_srcptr z) { return mpz_sizeinbase(z, 2); }  // O(1) for base 2

size_t bits(const mpq_class& q) { return mpz_sizeinbits(q.get_num_mpz_t()) + mpz_sizeinbits(q.get_den_mpz_t()); }

// An integer to long double with its top 64 bits (the full long double mantissa).
long double to_ld(const mpz_class& z) {
  const size_t n = mpz_sizeinbits(z.get_mpz_t());
  if (n <= 64) {
    const uint64_t m = mpz_get_ui(mpz_class(abs(z)).get_mpz_t());
    return sgn(z) < 0 ? -static_cast<long double>(m) : static_cast<long double>(m);
  }
  mpz_class top = abs(z) >> static_cast<mp_bitcnt_t>(n - 64);
  const long double m = std::ldexp(static_cast<long double>(mpz_get_ui(top.get_mpz_t())), static_cast<int>(n - 64));
  return sgn(z) < 0 ? -m : m;
}

long double to_ld(const mpq_class& q) {
  const long double n = to_ld(q.get_num());
  const long double d = to_ld(q.get_den());
  if (std::isinf(n) && std::isinf(d)) {  // both huge: scale them down together first
    const size_t shift = std::min(mpz_sizeinbits(q.get_num_mpz_t()), mpz_sizeinbits(q.get_den_mpz_t())) - 64;
    return to_ld(mpz_class(q.get_num() >> static_cast<mp_bitcnt_t>(shift))) /
           to_ld(mpz_class(q.get_den() >> static_cast<mp_bitcnt_t>(shift)));
  }
  return n / d;
}

Num exact(mpq_class q) {
  Num r;
  if (bits(q) > kMaxExactBits) {
    r.x = to_ld(q);
    r.kind = std::isfinite(r.x) ? Num::approx : Num::invalid;
    return r;
  }
  r.kind = Num::exact;
  r.x = to_ld(q);
  r.q = std::move(q);
  return r;
}

Num approx(long double x) {
  Num r;
  r.x = x;
  r.kind = std::isfinite(x) ? Num::approx : Num::invalid;
  return r;
}

bool finite(const Num& a) { return a.kind == Num::exact || a.kind == Num::approx; }

bool is_integer(const Num& a) { return a.kind == Num::exact && a.q.get_den() == 1; }

// "12.5e-3" -> 1/80. Exponents beyond +-4096 are not evaluated (invalid).
Num parse_number(const std::string& text) {
  const size_t e = text.find('e');
  const std::string mantissa = text.substr(0, e);
  long exponent = 0;
  if (e != std::string::npos) {
    const std::string digits = text.substr(e + 1);
    if (digits.size() > 6) return invalid();
    exponent = std::stol(digits);
  }
  const size_t dot = mantissa.find('.');
  std::string digits = mantissa;
  if (dot != std::string::npos) {
    digits.erase(dot, 1);
    exponent -= static_cast<long>(mantissa.size() - dot - 1);
  }
  if (digits.empty()) return invalid();
  if (exponent > 4096 || exponent < -4096) return invalid();
  mpz_class n(digits, 10);
  mpz_class scale;
  mpz_ui_pow_ui(scale.get_mpz_t(), 10, static_cast<unsigned long>(exponent < 0 ? -exponent : exponent));
  mpq_class q = exponent < 0 ? mpq_class(n, scale) : mpq_class(n * scale);
  q.canonicalize();
  return exact(std::move(q));
}

// splitmix64: the variable values of each point come from (name, point) alone, so the gold
// answer and the completion see the same values.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A rational p/q with p in [1, 2^20] and q in [1, 2^8]; positive at points 0-2, of random sign at
// the others (so |x| and x differ).
Num variable_value(const std::string& name, int point) {
  uint64_t h = 1469598103934665603ULL;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  const uint64_t r = mix(h ^ mix(static_cast<uint64_t>(point) + 1));
  const long p = static_cast<long>(r & 0xfffff) + 1;
  const long q = static_cast<long>((r >> 20) & 0xff) + 1;
  const bool negative = point >= 3 && ((r >> 40) & 1);
  mpq_class v(negative ? -p : p, q);
  v.canonicalize();
  return exact(std::move(v));
}

Num add(const Num& a, const Num& b) {
  if (!finite(a) || !finite(b)) return invalid();
  if (a.kind == Num::exact && b.kind == Num::exact) return exact(a.q + b.q);
  return approx(a.x + b.x);
}

Num mul(const Num& a, const Num& b) {
  if (!finite(a) || !finite(b)) return invalid();
  if (a.kind == Num::exact && b.kind == Num::exact) return exact(a.q * b.q);
  return approx(a.x * b.x);
}

Num negate(const Num& a) {
  Num r = a;
  switch (a.kind) {
    case Num::exact:
      r.q = -a.q;
      r.x = -a.x;
      return r;
    case Num::approx:
      r.x = -a.x;
      return r;
    case Num::pos_inf:
      r.kind = Num::neg_inf;
      return r;
    case Num::neg_inf:
      r.kind = Num::pos_inf;
      return r;
    default:
      return r;
  }
}

Num reciprocal(const Num& a) {
  if (!finite(a)) return invalid();
  if (a.kind == Num::exact) {
    if (sgn(a.q) == 0) return invalid();
    return exact(1 / a.q);
  }
  if (a.x == 0.0L) return invalid();
  return approx(1.0L / a.x);
}

// Exact q-th root of an exact non-negative integer, if there is one.
bool exact_root(const mpz_class& z, unsigned long q, mpz_class& root) {
  return mpz_root(root.get_mpz_t(), z.get_mpz_t(), q) != 0;
}

Num power(const Num& base, const Num& exponent) {
  if (!finite(base) || !finite(exponent)) return invalid();
  if (base.kind == Num::exact && exponent.kind == Num::exact) {
    const mpz_class& p = exponent.q.get_num();
    const mpz_class& q = exponent.q.get_den();
    const bool small = mpz_cmpabs_ui(p.get_mpz_t(), 1u << 16) <= 0 && q <= 16;
    if (small && (bits(base.q) + 1) * mpz_get_ui(mpz_class(abs(p)).get_mpz_t()) <= kMaxExactBits) {
      const unsigned long e = mpz_get_ui(mpz_class(abs(p)).get_mpz_t());
      mpq_class b = base.q;
      bool ok = true;
      if (q != 1) {  // a rational power: exact when num and den are perfect q-th powers
        const unsigned long k = mpz_get_ui(q.get_mpz_t());
        mpz_class rn, rd;
        if (sgn(b) < 0 || !exact_root(b.get_num(), k, rn) || !exact_root(b.get_den(), k, rd)) {
          ok = false;
        } else {
          b = mpq_class(rn, rd);
        }
      }
      if (ok) {
        if (sgn(b) == 0 && sgn(p) < 0) return invalid();
        mpz_class n, d;
        mpz_pow_ui(n.get_mpz_t(), b.get_num_mpz_t(), e);
        mpz_pow_ui(d.get_mpz_t(), b.get_den_mpz_t(), e);
        mpq_class r = sgn(p) < 0 ? mpq_class(d, n) : mpq_class(n, d);
        r.canonicalize();
        return exact(std::move(r));
      }
    }
  }
  if (base.x < 0 && !is_integer(exponent)) return invalid();
  return approx(std::pow(base.x, exponent.x));
}

Num square_root(const Num& a, const Num* index) {
  Num exponent = exact(mpq_class(1, 2));
  if (index != nullptr) exponent = reciprocal(*index);
  return power(a, exponent);
}

Num function(const std::string& name, const Num& a, const Num* base) {
  if (!finite(a)) return invalid();
  const long double x = a.x;
  if (name == "sin") return approx(std::sin(x));
  if (name == "cos") return approx(std::cos(x));
  if (name == "tan") return approx(std::tan(x));
  if (name == "sec") return approx(1.0L / std::cos(x));
  if (name == "csc") return approx(1.0L / std::sin(x));
  if (name == "cot") return approx(1.0L / std::tan(x));
  if (name == "exp") return approx(std::exp(x));
  if (name == "arcsin") return approx(std::asin(x));
  if (name == "arccos") return approx(std::acos(x));
  if (name == "arctan") return approx(std::atan(x));
  if (name == "sinh") return approx(std::sinh(x));
  if (name == "cosh") return approx(std::cosh(x));
  if (name == "tanh") return approx(std::tanh(x));
  if (x <= 0) return invalid();
  if (name == "lg") return approx(std::log10(x));
  if (base != nullptr) {  // \log_b x
    if (!finite(*base) || base->x <= 0 || base->x == 1.0L) return invalid();
    return approx(std::log(x) / std::log(base->x));
  }
  return approx(std::log(x));  // \ln and \log (natural, as sympy reads \log)
}

Num factorial(const Num& a) {
  if (!is_integer(a) || sgn(a.q) < 0 || a.q > 1000) return invalid();
  mpz_class r;
  mpz_fac_ui(r.get_mpz_t(), mpz_get_ui(a.q.get_num_mpz_t()));
  return exact(mpq_class(r));
}

Num binomial(const Num& n, const Num& k) {
  if (!is_integer(n) || !is_integer(k) || sgn(n.q) < 0 || n.q > 5000) return invalid();
  if (sgn(k.q) < 0 || k.q > n.q) return exact(mpq_class(0));
  mpz_class r;
  mpz_bin_uiui(r.get_mpz_t(), mpz_get_ui(n.q.get_num_mpz_t()), mpz_get_ui(k.q.get_num_mpz_t()));
  return exact(mpq_class(r));
}

}  // namespace

Num evaluate(const MathTree& tree, int node, int point, int pm_sign) {
  const MathNode& n = tree.nodes[static_cast<size_t>(node)];
  auto kid = [&](size_t i) { return evaluate(tree, n.kids[i], point, pm_sign); };
  switch (n.kind) {
    case NodeKind::number:
      return parse_number(n.text);
    case NodeKind::variable:
      return variable_value(n.text, point);
    case NodeKind::pi:
      return approx(3.14159265358979323846264338327950288L);
    case NodeKind::euler:
      return approx(2.71828182845904523536028747135266250L);
    case NodeKind::infinity: {
      Num r;
      r.kind = Num::pos_inf;
      return r;
    }
    case NodeKind::add:
    case NodeKind::mul: {
      Num acc = kid(0);
      for (size_t i = 1; i < n.kids.size() && acc.kind != Num::invalid; ++i) {
        acc = n.kind == NodeKind::add ? add(acc, kid(i)) : mul(acc, kid(i));
      }
      return acc;
    }
    case NodeKind::neg:
      return negate(kid(0));
    case NodeKind::recip:
      return reciprocal(kid(0));
    case NodeKind::pow:
      return power(kid(0), kid(1));
    case NodeKind::func: {
      if (n.kids.size() > 1) {
        const Num base = kid(1);
        return function(n.text, kid(0), &base);
      }
      return function(n.text, kid(0), nullptr);
    }
    case NodeKind::sqrt: {
      if (n.kids.size() > 1) {
        const Num index = kid(1);
        return square_root(kid(0), &index);
      }
      return square_root(kid(0), nullptr);
    }
    case NodeKind::factorial:
      return factorial(kid(0));
    case NodeKind::binom:
      return binomial(kid(0), kid(1));
    case NodeKind::abs: {
      const Num a = kid(0);
      if (a.kind == Num::exact) return exact(abs(a.q));
      if (a.kind == Num::approx) return approx(std::fabs(a.x));
      return invalid();
    }
    case NodeKind::plus_minus: {
      if (pm_sign == 0) return invalid();
      const Num b = kid(1);
      return add(kid(0), pm_sign > 0 ? b : negate(b));
    }
    default:
      return invalid();  // structures (sets, brackets, relations, text) are not numbers
  }
}

bool has_plus_minus(const MathTree& tree, int node) {
  const MathNode& n = tree.nodes[static_cast<size_t>(node)];
  if (n.kind == NodeKind::plus_minus) return true;
  for (const int k : n.kids) {
    if (has_plus_minus(tree, k)) return true;
  }
  return false;
}

bool has_variables(const MathTree& tree, int node) {
  const MathNode& n = tree.nodes[static_cast<size_t>(node)];
  if (n.kind == NodeKind::variable) return true;
  for (const int k : n.kids) {
    if (has_variables(tree, k)) return true;
  }
  return false;
}

bool same_value(const Num& a, const Num& b, double tolerance) {
  if (a.kind == Num::invalid || b.kind == Num::invalid) return false;
  if (!finite(a) || !finite(b)) return a.kind == b.kind;
  if (a.kind == Num::exact && b.kind == Num::exact) {
    if (tolerance <= 0.0) return a.q == b.q;
    const mpq_class diff = abs(a.q - b.q);
    const mpq_class scale = std::max(abs(a.q), abs(b.q));
    return diff <= mpq_class(tolerance) * scale;
  }
  const long double tol = std::max(static_cast<long double>(tolerance), kIrrationalTolerance);
  const long double scale = std::max(std::fabs(a.x), std::fabs(b.x));
  return std::fabs(a.x - b.x) <= tol * scale + 1e-18L;
}

}  // namespace unstuck::reward::math
