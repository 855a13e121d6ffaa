#!/usr/bin/env python3
"""No function in src/ longer than 100 lines (issue 48): a function that long holds several steps
that each deserve a name. Counts every function and method body, from the first line of its
signature to its closing brace; lambdas count as part of the function that holds them.

Usage: scripts/check_functions.py [--limit N] [--top K] [paths ...]   (default: src/)"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTROL = re.compile(r"(?:^|[^\w])(if|for|while|switch|catch|constexpr)\s*$")
QUALIFIERS = re.compile(r"(\s*(const|override|final|noexcept|mutable|&|&&|->\s*[\w:<>,\s\*&]+))*\s*$")


def strip_code(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i + 2)
            delim = ")" + text[i + 2:open_paren] + '"'
            j = text.find(delim, open_paren)
            j = n if j < 0 else j + len(delim)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def header_kind(header):
    """'function', 'lambda', 'control' or 'other' for the text before an opening brace."""
    h = header.strip()
    if not h or h.startswith("#"):
        return "other"
    h = QUALIFIERS.sub("", h) if not h.endswith(")") else h
    if not h.endswith(")"):
        return "other"
    depth, k = 0, len(h) - 1
    while k >= 0:  # the parenthesis that opens the last group
        depth += {")": 1, "(": -1}.get(h[k], 0)
        if depth == 0:
            break
        k -= 1
    before = h[:k].rstrip()
    if before.endswith("]") or before.endswith("mutable"):
        return "lambda"
    if CONTROL.search(before) or not before:
        return "control"
    return "function"


def functions(path):
    """(first line, last line, name) of each function body not inside another function."""
    code = strip_code(open(path, encoding="utf-8").read())
    stack, found, last = [], [], 0  # stack: (kind, first line)
    line_of = [0] * (len(code) + 1)
    line = 1
    for i, c in enumerate(code):
        line_of[i] = line
        if c == "\n":
            line += 1
    for i, c in enumerate(code):
        if c in ";{}":
            if c == "{":
                header = code[last:i]
                kind = header_kind(header)
                start = last + len(header) - len(header.lstrip())
                inside = any(k in ("function", "lambda") for k, _, _ in stack)
                stack.append((kind if not inside or kind != "function" else "nested", line_of[start],
                              " ".join(header.split())[:90]))
            elif c == "}" and stack:
                kind, first, name = stack.pop()
                if kind == "function":
                    found.append((first, line_of[i], name))
            last = i + 1
        elif c == "#" and (i == 0 or code[i - 1] == "\n"):
            last = code.find("\n", i) + 1 or len(code)  # a preprocessor line is no header
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--top", type=int, default=0, help="also print the K longest functions")
    ap.add_argument("paths", nargs="*", default=["src"])
    a = ap.parse_args(argv)
    rows = []
    for top in a.paths:
        base = os.path.join(ROOT, top)
        walk = [(os.path.dirname(base), [], [os.path.basename(base)])] if os.path.isfile(base) else os.walk(base)
        for folder, _, files in walk:
            for name in sorted(files):
                if name.endswith((".cpp", ".cu", ".h", ".cuh")):
                    path = os.path.join(folder, name)
                    for first, end, fn in functions(path):
                        rows.append((end - first + 1, os.path.relpath(path, ROOT), first, fn))
    rows.sort(reverse=True)
    for n, path, first, fn in rows[:a.top]:
        print(f"{n:5d}  {path}:{first}  {fn}")
    over = [r for r in rows if r[0] > a.limit]
    for n, path, first, fn in over:
        print(f"ERROR {path}:{first}: {n} lines (limit {a.limit}): {fn}")
    print(f"check_functions.py: {len(rows)} functions, {len(over)} over {a.limit} lines; the longest "
          f"{rows[0][0] if rows else 0}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
