#!/usr/bin/env python3
"""Differential test of Unstuck's math verifier against math-verify 0.9.0, on generated answer pairs.

Seeded generators write thousands of (gold, answer) pairs in classes that math answers come in
(integers, fractions vs decimals, thousands separators, surds and pi, polynomials, tuples, intervals,
sets, matrices, inequalities, labelled answers, scaled equations, LaTeX decoration, scientific
notation, complex numbers, unordered answer lists), about half of them equivalent by construction and
half small perturbations of an equivalent answer (off by one, sign flip, swapped order, open vs closed
endpoint, a different element). Each pair is scored twice:

  - math-verify, the oracle: verify(parse("$gold$"), parse("\\boxed{answer}")), default configs;
  - Unstuck: one `unstuck reward score` run over records {"task": "math", "answer": gold,
    "completion": "The answer is \\boxed{answer}."}; status "correct" means accepted.

It reports the agreement overall and per class, false positives (Unstuck accepts, math-verify does
not) and false negatives (the reverse) with examples, how many disagreements Unstuck gets right by
the construction (math-verify's own misses), how often both verifiers disagree with the construction
(informational), and the wall time of each side. It fails (exit 1) when the agreement
is below --min-agreement, or on any real false positive: Unstuck accepts a pair that was built
non-equivalent (whatever math-verify says of it).

Usage: math_differential.py --unstuck BUILD/unstuck --out DIR [--seed 1] [--per-class 150]
       [--min-agreement 0.95]. Writes DIR/pairs.jsonl, DIR/report.json and DIR/report.md.
Exit 77 (skipped) when math_verify cannot be imported (requirements-peers.txt installs it).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
from fractions import Fraction

kExamplesPerKind = 5  # examples kept per class of each kind of disagreement


# ---- formatting helpers ---------------------------------------------------------------------------

def decimal_string(value):
    """A terminating Fraction as a plain decimal: Fraction(-3, 8) -> "-0.375", Fraction(4) -> "4"."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    digits = 0
    while (value * 10 ** digits).denominator != 1:
        digits += 1
        assert digits < 20, "not a terminating decimal"
    scaled = str((value * 10 ** digits).numerator).rjust(digits + 1, "0")
    if digits == 0:
        return sign + scaled
    return sign + scaled[:-digits] + "." + scaled[-digits:]


def fraction_latex(value, style):
    """A Fraction written in one of the fraction styles: frac, dfrac, tfrac, slash, short (\\frac12)."""
    p, q = abs(value.numerator), value.denominator
    sign = "-" if value < 0 else ""
    if q == 1:
        return sign + str(p)
    if style == "slash":
        return f"{sign}{p}/{q}"
    if style == "short" and p < 10 and q < 10:
        return f"{sign}\\frac{p}{q}"
    command = {"dfrac": "\\dfrac", "tfrac": "\\tfrac"}.get(style, "\\frac")
    return f"{sign}{command}{{{p}}}{{{q}}}"


def number_latex(rng, value):
    """A rational written either as a fraction (some style) or, when it terminates, as a decimal."""
    terminates = all(f in (2, 5) for f in prime_factors(value.denominator))
    if value.denominator == 1:
        return str(value.numerator)
    if terminates and rng.random() < 0.5:
        return decimal_string(value)
    return fraction_latex(value, rng.choice(["frac", "dfrac", "slash"]))


def prime_factors(n):
    factors, d = [], 2
    while d * d <= n:
        while n % d == 0:
            factors.append(d)
            n //= d
        d += 1
    if n > 1:
        factors.append(n)
    return factors


def polynomial_latex(coefficients, var):
    """Coefficients highest degree first as LaTeX: [1, -4, 4], "x" -> "x^2-4x+4"."""
    terms = []
    degree = len(coefficients) - 1
    for k, c in enumerate(coefficients):
        power = degree - k
        if c == 0:
            continue
        monomial = "" if power == 0 else var if power == 1 else f"{var}^{power}"
        size = abs(c)
        body = str(size) if (size != 1 or power == 0) else ""
        terms.append(("-" if c < 0 else "+") + body + monomial)
    text = "".join(terms) or "0"
    return text[1:] if text.startswith("+") else text


def linear_latex(coefficients, variables):
    """sum c_i v_i as LaTeX: [2, -1], ["x", "y"] -> "2x-y"."""
    return polynomial_latex_terms([(c, v) for c, v in zip(coefficients, variables)])


def polynomial_latex_terms(terms):
    pieces = []
    for c, v in terms:
        if c == 0:
            continue
        body = str(abs(c)) if (abs(c) != 1 or v == "") else ""
        pieces.append(("-" if c < 0 else "+") + body + v)
    text = "".join(pieces) or "0"
    return text[1:] if text.startswith("+") else text


def spaced(rng, items, brackets=("(", ")")):
    """items joined by commas, with or without spaces, optionally with \\left/\\right brackets."""
    separator = rng.choice([",", ", "])
    left, right = brackets
    if left in "([" and rng.random() < 0.2:
        left, right = "\\left" + left, "\\right" + right
    return left + separator.join(items) + right


def distinct_ints(rng, count, low, high):
    return rng.sample(range(low, high + 1), count)


# ---- generators: one per class; each returns (gold, answer) for equivalent=True/False --------------
# A non-equivalent pair is always a small perturbation of an equivalent one, so both halves of a
# class look alike and only the perturbation tells them apart.

def gen_integers(rng, equivalent):
    n = rng.choice([rng.randint(0, 20), rng.randint(21, 999), rng.randint(1000, 99999)])
    if equivalent:
        answer = rng.choice([str(n), f"{n}.0", f"{n}.00", f"{{{n}}}", f" {n} ", f"+{n}"])
    else:
        reversed_digits = int(str(n)[::-1])
        if reversed_digits == n or str(n).endswith("0"):
            reversed_digits = n + 1
        wrong = rng.choice([n + 1, n - 1 if n > 0 else n + 2, n * 10 if n else 1, n + 10, reversed_digits])
        answer = str(wrong)
    return str(n), answer


def gen_decimals_fractions(rng, equivalent):
    q = rng.choice([2, 4, 5, 8, 10, 20, 25, 40, 50])
    p = rng.choice([k for k in range(1, 3 * q) if Fraction(k, q).denominator == q] or [1])
    value = Fraction(p, q)
    if equivalent:
        other = value
    else:
        other = rng.choice([Fraction(p + 1, q), Fraction(q, p), value + Fraction(1, 10), value * 10])
        if other == value:
            other = value + 1
    decimal_side = rng.random() < 0.5
    style = rng.choice(["frac", "dfrac", "tfrac", "slash", "short"])
    gold = decimal_string(value) if decimal_side else fraction_latex(value, style)
    # The answer takes the other notation: a fraction for a decimal gold, a decimal for a fraction gold
    # (when the perturbed value has no terminating decimal it stays a fraction).
    if decimal_side:
        answer = fraction_latex(other, rng.choice(["frac", "dfrac", "tfrac", "slash", "short"]))
    elif all(f in (2, 5) for f in prime_factors(other.denominator)):
        answer = decimal_string(other)
        if answer.startswith("0.") and rng.random() < 0.2:
            answer = answer[1:]  # ".5"
    else:
        answer = fraction_latex(other, "frac")
    return gold, answer


def gen_negatives(rng, equivalent):
    kind = rng.choice(["int", "fraction", "decimal"])
    if kind == "int":
        n = rng.randint(1, 500)
        gold = f"-{n}"
        forms = [f"-{n}", f"- {n}", f"(-{n})", f"-{n}.0"]
        wrong = [str(n), f"-{n + 1}", f"+{n}"]
    elif kind == "fraction":
        q = rng.randint(2, 12)
        p = rng.choice([k for k in range(1, 2 * q) if Fraction(k, q).denominator == q])
        gold = f"-\\frac{{{p}}}{{{q}}}"
        forms = [f"\\frac{{-{p}}}{{{q}}}", f"\\frac{{{p}}}{{-{q}}}", f"-{p}/{q}", f"-\\dfrac{{{p}}}{{{q}}}",
                 f"-\\left(\\frac{{{p}}}{{{q}}}\\right)"]
        wrong = [f"\\frac{{{p}}}{{{q}}}", f"\\frac{{-{p}}}{{-{q}}}", f"-\\frac{{{q}}}{{{p}}}"]
    else:
        value = Fraction(rng.randint(1, 999), rng.choice([10, 100, 4]))
        gold = "-" + decimal_string(value)
        forms = ["-" + decimal_string(value), "-" + fraction_latex(value, "frac"),
                 fraction_latex(-value, "slash")]
        wrong = [decimal_string(value), "-" + decimal_string(value + Fraction(1, 10))]
    answer = rng.choice(forms if equivalent else wrong)
    return (gold, answer) if rng.random() < 0.7 else (answer, gold)


def with_commas(n):
    return f"{n:,}"


def gen_thousands(rng, equivalent):
    n = rng.choice([rng.randint(1000, 9999), rng.randint(10000, 999999), rng.randint(1000000, 99999999)])
    if equivalent:
        kind = rng.choice(["plain", "plain", "brace", "thin", "tuple"])
        if kind == "tuple":
            # A tuple stays a tuple: (1,500) and (1, 500) are the same pair.
            a, b = rng.randint(1, 9), rng.randint(100, 999)
            return f"({a},{b})", f"({a}, {b})"
        separated = {"plain": with_commas(n), "brace": with_commas(n).replace(",", "{,}"),
                     "thin": with_commas(n).replace(",", "\\,")}[kind]
        pair = (with_commas(n), str(n)) if kind == "plain" else (str(n), separated)
        return pair if rng.random() < 0.5 else pair[::-1]
    kind = rng.choice(["off", "tuple_vs_number", "number_vs_tuple", "set_vs_number", "leading_zero"])
    if kind == "leading_zero":  # "0,100" is not a hundred: a thousands number never starts with 0
        b = rng.randint(100, 999)
        return str(b), f"0,{b}"
    if kind == "off":
        wrong = n + rng.choice([1, -1, 1000, -1000])
        return with_commas(n), rng.choice([str(wrong), with_commas(wrong)])
    # A comma inside brackets separates elements: (1,500) is a pair, never the number 1500.
    a, b = rng.randint(1, 99), rng.randint(100, 999)
    number = str(a * 1000 + b)
    if kind == "tuple_vs_number":
        return f"({a},{b})", number
    if kind == "number_vs_tuple":
        return number, f"({a},{b})"
    return f"\\{{{a},{b}\\}}", number


def gen_surds_pi(rng, equivalent):
    kind = rng.choice(["surd", "rationalized", "pi_fraction", "pi_multiple"])
    if kind == "surd":
        a, b = rng.randint(2, 6), rng.choice([2, 3, 5, 6, 7, 10])
        gold = f"{a}\\sqrt{{{b}}}"
        same = rng.choice([f"\\sqrt{{{a * a * b}}}", f"{a} \\sqrt{{{b}}}", f"\\sqrt{{{b}}} \\cdot {a}"])
        wrong = rng.choice([f"\\sqrt{{{a * a * b + 1}}}", f"{a + 1}\\sqrt{{{b}}}", f"\\sqrt{{{a * b}}}",
                            f"{a}\\sqrt{{{b + 1}}}"])
    elif kind == "rationalized":
        b = rng.choice([2, 3, 5, 6, 7])
        gold = f"\\frac{{\\sqrt{{{b}}}}}{{{b}}}"
        same = rng.choice([f"\\frac{{1}}{{\\sqrt{{{b}}}}}", f"1/\\sqrt{{{b}}}"])
        wrong = rng.choice([f"\\frac{{1}}{{{b}}}", f"\\sqrt{{{b}}}", f"\\frac{{\\sqrt{{{b}}}}}{{{b + 1}}}"])
    elif kind == "pi_fraction":
        k = rng.randint(2, 12)
        gold = f"\\frac{{\\pi}}{{{k}}}"
        same = rng.choice([f"\\pi/{k}", f"\\frac{{1}}{{{k}}}\\pi", f"\\dfrac{{\\pi}}{{{k}}}"])
        wrong = rng.choice([f"\\frac{{\\pi}}{{{k + 1}}}", f"\\pi/{k - 1}" if k > 2 else "\\pi",
                            f"\\frac{{{k}}}{{\\pi}}"])
    else:
        k = rng.randint(2, 9)
        gold, same = f"{k}\\pi", rng.choice([f"\\pi \\cdot {k}", f"{k} \\cdot \\pi", f"{k} \\pi"])
        wrong = rng.choice([f"{k + 1}\\pi", f"{k - 1}\\pi", f"{k}"])
    answer = same if equivalent else wrong
    return (gold, answer) if rng.random() < 0.5 else (answer, gold)


def gen_algebraic(rng, equivalent):
    var = rng.choice(["x", "x", "t", "n", "y"])
    kind = rng.choice(["square", "product", "scaled"])
    a = rng.choice([k for k in range(-6, 7) if k != 0])
    b = rng.choice([k for k in range(-6, 7) if k not in (0, a, -a)])
    if kind == "square":
        factored = f"({polynomial_latex([1, a], var)})^2"
        expanded = [1, 2 * a, a * a]
    elif kind == "product":
        factored = f"({polynomial_latex([1, a], var)})({polynomial_latex([1, b], var)})"
        expanded = [1, a + b, a * b]
    else:
        k = rng.randint(2, 5)
        factored = f"{k}({polynomial_latex([1, a], var)})"
        expanded = [0, k, k * a]
    if not equivalent:
        # Change one coefficient by one, or flip the sign of the constant term.
        index = rng.choice([1, 2])
        expanded = list(expanded)
        if index == 2 and rng.random() < 0.5:
            expanded[index] = -expanded[index]
        else:
            expanded[index] += rng.choice([1, -1])
    expanded_text = polynomial_latex(expanded, var)
    return (factored, expanded_text) if rng.random() < 0.5 else (expanded_text, factored)


def gen_tuples(rng, equivalent):
    size = rng.choice([2, 2, 3])
    values = [Fraction(v) for v in distinct_ints(rng, size, -9, 12)]
    if rng.random() < 0.3:
        values[rng.randrange(size)] = Fraction(rng.choice([1, 3, 5]), rng.choice([2, 4]))
    gold = "(" + ",".join(fraction_latex(v, "frac") for v in values) + ")"
    if equivalent:
        answer = spaced(rng, [number_latex(rng, v) for v in values])
    else:
        other = list(values)
        kind = rng.choice(["swap", "swap", "change"])
        if kind == "swap":
            i, j = rng.sample(range(size), 2)
            other[i], other[j] = other[j], other[i]
        else:
            other[rng.randrange(size)] += rng.choice([1, -1])
        answer = spaced(rng, [number_latex(rng, v) for v in other])
    return gold, answer


def interval_latex(rng, low, high, low_closed, high_closed):
    """One interval; None for an infinite end."""
    left = "[" if low_closed else "("
    right = "]" if high_closed else ")"
    low_text = "-\\infty" if low is None else str(low)
    high_text = rng.choice(["\\infty", "+\\infty"]) if high is None else str(high)
    return spaced(rng, [low_text, high_text], (left, right))


def gen_intervals(rng, equivalent):
    a, b, c = sorted(distinct_ints(rng, 3, -10, 10))
    kind = rng.choice(["bounded", "ray_up", "ray_down", "outside", "two_bounded"])
    if kind == "bounded":
        pieces = [[a, b, rng.random() < 0.5, rng.random() < 0.5]]
    elif kind == "ray_up":
        pieces = [[a, None, rng.random() < 0.5, False]]
    elif kind == "ray_down":
        pieces = [[None, a, False, rng.random() < 0.5]]
    elif kind == "outside":
        pieces = [[None, a, False, rng.random() < 0.5], [b, None, rng.random() < 0.5, False]]
    else:
        # a < b < c: the pieces are disjoint and do not touch
        pieces = [[a, b, rng.random() < 0.5, False], [c, c + rng.randint(1, 5), True, rng.random() < 0.5]]
    gold = "\\cup".join(interval_latex(rng, *p) for p in pieces)
    other = [list(p) for p in pieces]
    if not equivalent:
        piece = rng.choice(other)
        finite = [k for k in (0, 1) if piece[k] is not None]
        end = rng.choice(finite)
        if rng.random() < 0.6:
            piece[2 + end] = not piece[2 + end]  # open <-> closed endpoint
        else:
            piece[end] += rng.choice([1, -1]) if piece[1 - end] is None else (-1 if end == 0 else 1)
    if equivalent and len(other) > 1 and rng.random() < 0.3:
        other = other[::-1]  # a union reads the same in either order
    answer = rng.choice(["\\cup", " \\cup "]).join(interval_latex(rng, *p) for p in other)
    return gold, answer


def gen_sets(rng, equivalent):
    size = rng.randint(2, 5)
    values = distinct_ints(rng, size, -5, 15)
    gold = "\\{" + ",".join(str(v) for v in values) + "\\}"
    other = list(values)
    if not equivalent:
        kind = rng.choice(["replace", "drop", "add"])
        if kind == "replace":
            other[rng.randrange(size)] = rng.choice([v for v in range(-5, 16) if v not in values])
        elif kind == "drop":
            other.pop(rng.randrange(size))
        else:
            other.append(rng.choice([v for v in range(-5, 16) if v not in values]))
    rng.shuffle(other)
    braces = rng.choice([("\\{", "\\}"), ("\\{", "\\}"), ("{", "}"), ("\\left\\{", "\\right\\}")])
    answer = braces[0] + rng.choice([",", ", "]).join(str(v) for v in other) + braces[1]
    return gold, answer


def matrix_latex(rows, environment):
    body = "\\\\".join("&".join(row) for row in rows)
    return f"\\begin{{{environment}}}{body}\\end{{{environment}}}"


def gen_matrices(rng, equivalent):
    shape = rng.choice([(2, 1), (3, 1), (2, 2)])
    count = shape[0] * shape[1]
    entries = [Fraction(v) for v in distinct_ints(rng, count, -9, 9)]
    if rng.random() < 0.3:
        entries[rng.randrange(count)] = Fraction(rng.choice([1, 3]), 2)

    def rows_of(values, number):
        texts = [number(v) for v in values]
        return [texts[r * shape[1]:(r + 1) * shape[1]] for r in range(shape[0])]

    gold = matrix_latex(rows_of(entries, lambda v: fraction_latex(v, "frac")), "pmatrix")
    other = list(entries)
    if not equivalent:
        if shape == (2, 2) and rng.random() < 0.3:
            other = [other[0], other[2], other[1], other[3]]  # transpose of a non-symmetric matrix
        elif rng.random() < 0.5:
            i, j = rng.sample(range(count), 2)
            other[i], other[j] = other[j], other[i]
        else:
            other[rng.randrange(count)] += rng.choice([1, -1])
    environment = rng.choice(["pmatrix", "bmatrix", "pmatrix"])
    answer = matrix_latex(rows_of(other, lambda v: number_latex(rng, v)), environment)
    return gold, answer


def gen_inequalities(rng, equivalent):
    a, b = sorted(distinct_ints(rng, 2, -10, 10))
    var = rng.choice(["x", "x", "t"])
    less = {True: rng.choice(["\\le", "\\leq"]), False: "<"}
    greater = {True: rng.choice(["\\ge", "\\geq"]), False: ">"}
    kind = rng.choice(["above", "below", "between"])
    closed = rng.random() < 0.5
    if kind == "above":
        inequality = rng.choice([f"{var} {greater[closed]} {a}", f"{a} {less[closed]} {var}"])
        interval = (a, None, closed, False)
    elif kind == "below":
        inequality = f"{var} {less[closed]} {a}"
        interval = (None, a, False, closed)
    else:
        closed_high = rng.random() < 0.5
        inequality = f"{a} {less[closed]} {var} {less[closed_high]} {b}"
        interval = (a, b, closed, closed_high)
    low, high, low_closed, high_closed = interval
    if not equivalent:
        changes = ["strictness", "endpoint"] + (["direction"] if kind != "between" else [])
        change = rng.choice(changes)
        if change == "strictness":
            if low is not None:
                low_closed = not low_closed
            else:
                high_closed = not high_closed
        elif change == "endpoint":
            if low is not None:
                low += rng.choice([1, -1])
            else:
                high += rng.choice([1, -1])
        else:  # x > a against (-inf, a): the other side of a
            if low is not None:
                low, high, low_closed, high_closed = None, low, False, low_closed
            else:
                low, high, low_closed, high_closed = high, None, high_closed, False
    interval_text = interval_latex(rng, low, high, low_closed, high_closed)
    return (inequality, interval_text) if rng.random() < 0.5 else (interval_text, inequality)


def gen_not_equal(rng, equivalent):
    a = rng.randint(-9, 9)
    var = rng.choice(["x", "x", "y"])
    gold = f"{var} " + rng.choice(["\\ne", "\\neq"]) + f" {a}"
    if equivalent:
        answer = rng.choice([f"{var}\\neq {a}", f"{var} \\ne {a}",
                             f"(-\\infty,{a})\\cup({a},\\infty)", f"(-\\infty, {a}) \\cup ({a}, +\\infty)"])
    else:
        answer = rng.choice([f"{var} \\ne {a + 1}", f"{var} = {a}", f"(-\\infty,{a}]\\cup({a},\\infty)",
                             f"(-\\infty,{a})\\cup({a + 1},\\infty)", f"{var} \\neq {-a if a else 1}"])
    return (gold, answer) if rng.random() < 0.6 else (answer, gold)


def gen_labelled(rng, equivalent):
    kind = rng.choice(["variable", "function", "line", "fraction"])
    if kind == "variable":
        var, value = rng.choice(["x", "y", "n", "k", "a"]), rng.randint(-20, 40)
        labelled, bare = f"{var}={value}", str(value)
        wrong = rng.choice([str(value + 1), str(-value) if value else "1"])
    elif kind == "function":
        value = rng.randint(-10, 30)
        labelled, bare = rng.choice([f"f(x)={value}", f"f(2) = {value}", f"g(x)={value}"]), str(value)
        wrong = str(value + rng.choice([1, -1]))
    elif kind == "line":
        m, c = rng.choice([k for k in range(-5, 6) if k]), rng.choice([k for k in range(-9, 10) if k])
        bare = polynomial_latex([m, c], "x")
        labelled = f"y = {bare}"
        wrong = rng.choice([polynomial_latex([m, -c], "x"), polynomial_latex([m + 1, c], "x")])
    else:
        q = rng.choice([2, 4, 5, 8])
        p = rng.choice([k for k in range(1, q) if Fraction(k, q).denominator == q])
        labelled, bare = f"a = \\frac{{{p}}}{{{q}}}", decimal_string(Fraction(p, q))
        wrong = decimal_string(Fraction(p + 1, q))
    answer = bare if equivalent else wrong
    return (labelled, answer) if rng.random() < 0.6 else (answer, labelled)


def gen_scaled_equations(rng, equivalent):
    variables = rng.choice([["x", "y"], ["x", "y", "z"], ["y", "x"]])
    coefficients = [rng.choice([k for k in range(-4, 5) if k]) for _ in variables]
    constant = rng.randint(-6, 9)
    gold = f"{linear_latex(coefficients, variables)}={constant}"
    factor = rng.choice([2, 3, -1, -2, 5])
    scaled = [factor * c for c in coefficients]
    scaled_constant = factor * constant
    if equivalent:
        form = rng.choice(["scaled", "scaled", "moved", "swapped"])
        if form == "moved":  # everything on the left: ax+by-c=0
            terms = [(c, v) for c, v in zip(scaled, variables)] + [(-scaled_constant, "")]
            answer = f"{polynomial_latex_terms(terms)}=0"
        elif form == "swapped":
            answer = f"{scaled_constant} = {linear_latex(scaled, variables)}"
        else:
            answer = f"{linear_latex(scaled, variables)}={scaled_constant}"
    else:
        change = rng.choice(["constant", "coefficient", "one_side"])
        if change == "constant":
            scaled_constant += rng.choice([1, -1])
        elif change == "coefficient":
            i = rng.randrange(len(scaled))
            scaled[i] += 1 if scaled[i] != -1 else 2
        else:  # only the left side scaled
            scaled_constant = constant if scaled_constant != constant else constant + 1
        answer = f"{linear_latex(scaled, variables)}={scaled_constant}"
    return (gold, answer) if rng.random() < 0.5 else (answer, gold)


def gen_latex_decoration(rng, equivalent):
    kind = rng.choice(["displaystyle", "left_right", "text_space", "thin_space", "degree", "percent"])
    n = rng.randint(1, 90)
    other = n if equivalent else n + rng.choice([1, -1, 10])
    if kind == "displaystyle":
        q = rng.randint(2, 9)
        gold, answer = f"\\frac{{{n}}}{{{q}}}", f"\\displaystyle\\frac{{{other}}}{{{q}}}"
    elif kind == "left_right":
        m = rng.randint(-9, 9)
        gold, answer = f"({n}, {m})", f"\\left( {other} , {m} \\right)"
    elif kind == "text_space":
        gold = str(n)
        answer = rng.choice([f"{other}\\text{{ }}", f"\\text{{ }}{other}", f"\\text{{{other}}}"])
    elif kind == "thin_space":
        gold = str(n)
        answer = rng.choice([f"\\,{other}", f"{other}\\,", f"\\;{other}", f"\\ {other}", f"\\!{other}"])
    elif kind == "degree":
        gold = rng.choice([f"{n}^\\circ", str(n), f"{n}^{{\\circ}}"])
        answer = rng.choice([f"{other}^\\circ", f"{other}^{{\\circ}}", str(other), f"{other}\\degree"])
    else:
        gold = rng.choice([f"{n}\\%", str(n)])
        if gold == str(n):
            answer = rng.choice([f"{other}\\%", f"{other} \\%", f"{other}\\text{{ \\%}}"])
        else:
            answer = rng.choice([f"{other}\\%", str(other)])
    return gold, answer


def gen_scientific(rng, equivalent):
    mantissa = Fraction(rng.randint(11, 99), 10)  # 1.1 .. 9.9
    exponent = rng.choice([-4, -3, -2, 2, 3, 4, 5, 6])
    value = mantissa * Fraction(10) ** exponent
    if equivalent:
        m_text, e_value = decimal_string(mantissa), exponent
    elif rng.random() < 0.5:
        m_text, e_value = decimal_string(mantissa), exponent + rng.choice([1, -1])
    else:
        m_text, e_value = decimal_string(mantissa + Fraction(1, 10)), exponent
    times = rng.choice(["\\times", "\\cdot", " \\times "])
    exponent_text = str(e_value) if 0 <= e_value < 10 and rng.random() < 0.5 else f"{{{e_value}}}"
    scientific = f"{m_text}{times}10^{exponent_text}"
    plain = decimal_string(value)
    return (scientific, plain) if rng.random() < 0.5 else (plain, scientific)


def complex_latex(real, imag, imag_first=False):
    imag_text = {1: "i", -1: "-i"}.get(imag, f"{imag}i")
    if imag_first:
        return imag_text + (f"+{real}" if real > 0 else f"{real}")
    return str(real) + (f"+{imag_text}" if imag > 0 else imag_text)


def gen_complex(rng, equivalent):
    real = rng.choice([k for k in range(-9, 10) if k])
    imag = rng.choice([k for k in range(-9, 10) if k not in (0, real)])
    gold = complex_latex(real, imag)
    if equivalent:
        spaced_form = gold[0] + gold[1:].replace("+", " + ").replace("-", " - ")  # "3 - 2i", "-1 + i"
        times_i = f"{real}+{imag} \\cdot i" if imag > 1 else complex_latex(real, imag, imag_first=True)
        answer = rng.choice([complex_latex(real, imag, imag_first=True), f"({gold})", spaced_form, times_i])
    else:
        answer = rng.choice([complex_latex(real, -imag), complex_latex(imag, real),
                             complex_latex(real + 1, imag)])
    return gold, answer


def gen_multiple_answers(rng, equivalent):
    values = distinct_ints(rng, rng.choice([2, 2, 3]), -9, 20)
    gold = ", ".join(str(v) for v in values)
    other = list(values)
    if not equivalent:
        kind = rng.choice(["change", "drop", "add"])
        if kind == "change":
            i = rng.randrange(len(other))
            other[i] = rng.choice([v for v in range(-9, 21) if v not in values])
        elif kind == "drop":
            other.pop(rng.randrange(len(other)))
        else:
            other.append(rng.choice([v for v in range(-9, 21) if v not in values]))
    shuffled = list(other)
    while len(shuffled) > 1 and shuffled == other and equivalent:
        rng.shuffle(shuffled)  # the equivalent answer always lists them in another order
    if not equivalent:
        rng.shuffle(shuffled)
    answer = rng.choice([",", ", "]).join(str(v) for v in shuffled)
    return gold, answer


# ---- free text: the answer written in a sentence, no box (reward.answer_formats last_expression) ----

def is_plain_number(text):
    return bool(text) and all(c.isdigit() or c in ".,-" for c in text.strip()) and any(
        c.isdigit() for c in text)


def math_wrapped(rng, answer):
    """The answer as free text writes it: bare when a plain number, else in a math environment."""
    answer = answer.strip()
    forms = [f"${answer}$", f"\\({answer}\\)"]
    if is_plain_number(answer) and not answer.startswith("."):
        forms += [answer, answer, f"**{answer}**"]
    return rng.choice(forms)


def distractors(rng):
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    return rng.choice([f"First, {a} + {b} = {a + b}, and we carry on. ",
                       f"There are {a} cases with {b} steps each. ",
                       f"Multiplying gives ${a} \\times {b} = {a * b}$. ",
                       ""])


FREE_TEXT_TEMPLATES = [
    "{d}So the result is {m}.",
    "{d}The final answer is {m}. I hope it is correct.",
    "{d}Final answer: {m}",
    "{d}Answer: {m}\nThat completes the solution.",
    "{d}After simplifying we obtain\n\\[{a}\\]",
    "{d}Checking all cases, the answer is {m}.",
    "{d}**Answer:** {m}",
    "{d}Therefore, we get {m}",
    # the anchors must win over numbers written after the answer
    "{d}The final answer is {m}. I hope it is correct; it took 3 steps.",
    "{d}Answer: {m} (from step 2 of 4)",
    "{d}So the answer is {m} in 2 ways, checked twice.",
]
# A reward is trained against: numbers the reasoning mentions before the final answer must not be
# read as it. These put the gold answer first and the (perturbed) final answer last.
FREE_TEXT_RETRACTIONS = [
    "A first guess would be {g}, but correcting the sign error gives {m}.",
    "It is not {g}; recomputing carefully, we get {m}.",
]


def free_text_pair(rng, equivalent, inner_generators):
    gold, answer = rng.choice(inner_generators)(rng, equivalent)
    if not equivalent and rng.random() < 0.3:
        template = rng.choice(FREE_TEXT_RETRACTIONS)
        return gold, template.format(g=math_wrapped(rng, gold), m=math_wrapped(rng, answer))
    template = rng.choice(FREE_TEXT_TEMPLATES)
    return gold, template.format(d=distractors(rng), m=math_wrapped(rng, answer), a=answer.strip())


def gen_free_text_numbers(rng, equivalent):
    return free_text_pair(rng, equivalent, [gen_integers, gen_decimals_fractions, gen_negatives,
                                            gen_thousands, gen_scientific])


def gen_free_text_latex(rng, equivalent):
    return free_text_pair(rng, equivalent, [gen_surds_pi, gen_algebraic, gen_tuples, gen_intervals,
                                            gen_sets, gen_labelled])


# Classes whose "answer" is a whole free-text completion, scored with last_expression.
FREE_TEXT_CLASSES = {"free_text_numbers", "free_text_latex"}

GENERATORS = {
    "integers": gen_integers,
    "decimals_fractions": gen_decimals_fractions,
    "negatives": gen_negatives,
    "thousands_separators": gen_thousands,
    "surds_pi": gen_surds_pi,
    "algebraic": gen_algebraic,
    "tuples": gen_tuples,
    "intervals": gen_intervals,
    "sets": gen_sets,
    "matrices": gen_matrices,
    "inequalities": gen_inequalities,
    "not_equal": gen_not_equal,
    "labelled": gen_labelled,
    "scaled_equations": gen_scaled_equations,
    "latex_decoration": gen_latex_decoration,
    "scientific": gen_scientific,
    "complex": gen_complex,
    "multiple_answers": gen_multiple_answers,
    "free_text_numbers": gen_free_text_numbers,
    "free_text_latex": gen_free_text_latex,
}


def generate_pairs(seed, per_class):
    """per_class distinct pairs per class, equivalent and non-equivalent alternating; each class draws
    from its own stream (seed, class name) so adding a class does not change the others' pairs."""
    pairs = []
    for name, generate in GENERATORS.items():
        rng = random.Random(f"{seed}:{name}")
        seen = set()
        attempts = 0
        while len(seen) < per_class and attempts < 50 * per_class:
            equivalent = len(seen) % 2 == 0
            gold, answer = generate(rng, equivalent)
            attempts += 1
            if (gold, answer) in seen:
                continue
            seen.add((gold, answer))
            pairs.append({"class": name, "gold": gold, "answer": answer, "equivalent": equivalent})
    return pairs


# ---- scoring --------------------------------------------------------------------------------------

def completion_of(p):
    """The completion both verifiers read: the answer boxed, or the free text as it is."""
    return p["answer"] if p["class"] in FREE_TEXT_CLASSES else f"The answer is \\boxed{{{p['answer']}}}."


def math_verify_verdict(parse, verify, gold, completion):
    try:
        return bool(verify(parse(f"${gold}$"), parse(completion)))
    except Exception:  # math-verify's own failures count as "not correct"
        return False


def score_math_verify(pairs):
    """math-verify's verdicts and the seconds its loop took. It times out with signals, so it runs here,
    in the main thread."""
    from math_verify import parse, verify

    math_verify_verdict(parse, verify, "1", "\\boxed{1}")  # import and first-call set-up are not timed
    start = time.perf_counter()
    verdicts = [math_verify_verdict(parse, verify, p["gold"], completion_of(p)) for p in pairs]
    return verdicts, time.perf_counter() - start


def score_unstuck(unstuck, pairs, out_dir):
    """Unstuck's statuses and its wall seconds: boxed answers in one `unstuck reward score` run, free
    text in a second with `--answer-formats answer_tag,boxed,hashes,last_expression`."""
    statuses = [None] * len(pairs)
    seconds = 0.0
    for free_text in (False, True):
        chosen = [i for i, p in enumerate(pairs) if (p["class"] in FREE_TEXT_CLASSES) == free_text]
        if not chosen:
            continue
        name = "free_text" if free_text else "boxed"
        input_path = os.path.join(out_dir, f"unstuck_input_{name}.jsonl")
        output_path = os.path.join(out_dir, f"unstuck_output_{name}.jsonl")
        with open(input_path, "w", encoding="utf-8") as f:
            for i in chosen:
                record = {"task": "math", "prompt": "p", "answer": pairs[i]["gold"],
                          "completion": completion_of(pairs[i])}
                f.write(json.dumps(record) + "\n")
        command = [unstuck, "reward", "score", "--input", input_path, "--output", output_path]
        if free_text:
            command += ["--answer-formats", "answer_tag,boxed,hashes,last_expression"]
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        seconds += time.perf_counter() - start
        if result.returncode != 0:
            sys.exit(f"unstuck reward score failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
        rows = [json.loads(line) for line in open(output_path, encoding="utf-8") if line.strip()]
        if len(rows) != len(chosen):
            sys.exit(f"{output_path}: {len(rows)} lines for {len(chosen)} pairs")
        for i, row in zip(chosen, rows):
            statuses[i] = row["status"]
    return statuses, seconds


# ---- report ---------------------------------------------------------------------------------------

def build_report(pairs, args, math_verify_seconds, unstuck_seconds):
    classes = {}
    for p in pairs:
        c = classes.setdefault(p["class"], {
            "count": 0, "equivalent": 0, "agree": 0, "false_positives": 0, "false_negatives": 0,
            "both_disagree_with_construction": 0, "unstuck_sides_with_construction": 0,
            "fp_examples": [], "fn_examples": [], "construction_examples": []})
        c["count"] += 1
        c["equivalent"] += p["equivalent"]
        example = {"gold": p["gold"], "answer": p["answer"], "equivalent": p["equivalent"],
                   "unstuck_status": p["unstuck_status"]}
        if p["unstuck"] == p["math_verify"]:
            c["agree"] += 1
            if p["unstuck"] != p["equivalent"]:
                c["both_disagree_with_construction"] += 1
                if len(c["construction_examples"]) < kExamplesPerKind:
                    c["construction_examples"].append(example)
            continue
        # A disagreement where Unstuck matches the construction is math-verify's miss, not Unstuck's.
        c["unstuck_sides_with_construction"] += p["unstuck"] == p["equivalent"]
        if p["unstuck"]:
            c["false_positives"] += 1
            if len(c["fp_examples"]) < kExamplesPerKind:
                c["fp_examples"].append(example)
        else:
            c["false_negatives"] += 1
            if len(c["fn_examples"]) < kExamplesPerKind:
                c["fn_examples"].append(example)
    for c in classes.values():
        c["agreement"] = c["agree"] / c["count"]
    real_false_positives = [{"class": p["class"], "gold": p["gold"], "answer": p["answer"]} for p in pairs
                            if p["unstuck"] and not p["equivalent"]]  # wrong by construction, whatever math-verify says
    def total(key):
        return sum(c[key] for c in classes.values())

    return {
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "cpu": cpu_name(),
        "seed": args.seed, "per_class": args.per_class, "min_agreement": args.min_agreement,
        "pairs": len(pairs), "agreement": total("agree") / len(pairs),
        "false_positives": total("false_positives"), "false_negatives": total("false_negatives"),
        "both_disagree_with_construction": total("both_disagree_with_construction"),
        "unstuck_sides_with_construction": total("unstuck_sides_with_construction"),
        "real_false_positives": real_false_positives,
        "math_verify_seconds": math_verify_seconds, "unstuck_seconds": unstuck_seconds,
        "speedup": math_verify_seconds / unstuck_seconds if unstuck_seconds > 0 else None,
        "classes": classes,
    }


def cpu_name():
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unnamed CPU")


def markdown(report):
    lines = [
        "# Unstuck math verifier vs math-verify 0.9.0", "",
        f"`{report['command']}`" + (f" on {report['cpu']}" if "cpu" in report else ""), "",  # older: not recorded
        f"- pairs: {report['pairs']}, agreement: {report['agreement']:.4f} "
        f"(minimum {report['min_agreement']})",
        f"- false positives (Unstuck correct, math-verify not): {report['false_positives']}; "
        f"false negatives: {report['false_negatives']}",
        f"- real false positives (accepted, non-equivalent by construction): "
        f"{len(report['real_false_positives'])}",
        f"- disagreements where Unstuck matches the construction (math-verify's misses): "
        f"{report['unstuck_sides_with_construction']}",
        f"- both verifiers disagree with the construction (informational): "
        f"{report['both_disagree_with_construction']}",
        f"- wall time: math-verify {report['math_verify_seconds']:.2f} s, "
        f"unstuck {report['unstuck_seconds']:.2f} s"
        + (f" ({report['speedup']:.1f}x)" if report["speedup"] else ""),
        "", "| class | count | agreement | FP | FN | Unstuck = construction | both vs construction |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in report["classes"].items():
        lines.append(f"| {name} | {c['count']} | {c['agreement']:.3f} | {c['false_positives']} | "
                     f"{c['false_negatives']} | {c['unstuck_sides_with_construction']} | "
                     f"{c['both_disagree_with_construction']} |")
    if report["real_false_positives"]:
        lines += ["", "## Real false positives", ""]
        lines += [f"- {r['class']}: gold `{r['gold']}`, answer `{r['answer']}`"
                  for r in report["real_false_positives"]]
    for name, c in report["classes"].items():
        if not (c["fp_examples"] or c["fn_examples"] or c["construction_examples"]):
            continue
        lines += ["", f"## {name}", ""]
        for title, key in (("false positives", "fp_examples"), ("false negatives", "fn_examples"),
                           ("both disagree with the construction", "construction_examples")):
            for e in c[key]:
                lines.append(f"- {title}: gold `{e['gold']}`, answer `{e['answer']}` (equivalent by "
                             f"construction: {e['equivalent']}, unstuck: {e['unstuck_status']})")
    return "\n".join(lines) + "\n"


def print_summary(report):
    print(f"pairs {report['pairs']}  agreement {report['agreement']:.4f}  "
          f"FP {report['false_positives']}  FN {report['false_negatives']}  "
          f"unstuck=construction {report['unstuck_sides_with_construction']}  "
          f"both-vs-construction {report['both_disagree_with_construction']}")
    print(f"{'class':24s} {'count':>6s} {'agree':>7s} {'FP':>5s} {'FN':>5s} {'U=constr':>9s} {'both-vs':>8s}")
    for name, c in report["classes"].items():
        print(f"{name:24s} {c['count']:6d} {c['agreement']:7.3f} {c['false_positives']:5d} "
              f"{c['false_negatives']:5d} {c['unstuck_sides_with_construction']:9d} "
              f"{c['both_disagree_with_construction']:8d}")
    speedup = f" -> unstuck {report['speedup']:.1f}x faster" if report["speedup"] else ""
    print(f"wall time: math-verify {report['math_verify_seconds']:.2f} s, "
          f"unstuck {report['unstuck_seconds']:.2f} s{speedup}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unstuck", help="the unstuck binary")
    parser.add_argument("--out", help="directory for pairs.jsonl, report.json, report.md")
    parser.add_argument("--markdown", metavar="REPORT_JSON", help="print the report.md of a saved report.json and "
                        "exit (docs/results/math-differential/; scripts/reports.py --check)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the pair generators")
    parser.add_argument("--per-class", type=int, default=150, help="pairs per class, half equivalent")
    parser.add_argument("--min-agreement", type=float, default=0.95, help="fail below this overall agreement")
    args = parser.parse_args()
    if args.markdown:
        with open(args.markdown, encoding="utf-8") as f:
            sys.stdout.write(markdown(json.load(f)))
        return 0
    if not args.unstuck or not args.out:
        parser.error("--unstuck and --out are required (or --markdown REPORT_JSON)")

    try:
        import math_verify  # noqa: F401
    except ImportError as e:
        print(f"skipped: math_verify cannot be imported ({e})")
        return 77

    os.makedirs(args.out, exist_ok=True)
    pairs = generate_pairs(args.seed, args.per_class)
    math_verify_verdicts, math_verify_seconds = score_math_verify(pairs)
    statuses, unstuck_seconds = score_unstuck(args.unstuck, pairs, args.out)
    for p, oracle, status in zip(pairs, math_verify_verdicts, statuses):
        p["math_verify"], p["unstuck_status"], p["unstuck"] = oracle, status, status == "correct"
    with open(os.path.join(args.out, "pairs.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps(p) + "\n" for p in pairs)

    report = build_report(pairs, args, math_verify_seconds, unstuck_seconds)
    with open(os.path.join(args.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(args.out, "report.md"), "w", encoding="utf-8") as f:
        f.write(markdown(report))
    print_summary(report)

    failed = False
    if report["real_false_positives"]:
        failed = True
        print(f"\nFAIL  {len(report['real_false_positives'])} real false positives "
              "(Unstuck accepts; math-verify and the construction say wrong):")
        for r in report["real_false_positives"]:
            print(f"  {r['class']:22s} gold {r['gold']!r:40s} answer {r['answer']!r}")
    if report["agreement"] < args.min_agreement:
        failed = True
        print(f"\nFAIL  agreement {report['agreement']:.4f} < --min-agreement {args.min_agreement}")
    print(f"report: {os.path.join(args.out, 'report.md')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
