#!/usr/bin/env python3
"""The import graph of scripts/paper/ against its declared layers (paper.LAYERS), read from the source
with `ast` (imports inside functions included): every module sits in exactly one layer, imports only
modules of lower layers, and the graph has no cycle; no module imports a command of scripts/ (the
thin wrappers import the package, not the other way). Also that every wrapper of scripts/ that names
a module of the package exists and has a main. Run by ctest (`paper.imports`); exits non-zero on the
first failed check.
"""
import ast
import os
import sys

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.dirname(PACKAGE)
sys.path.insert(0, SCRIPTS)
from paper import LAYERS  # noqa: E402


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def imported(path):
    """(names of package modules imported, top-level names imported absolutely) by one source file."""
    tree = ast.parse(open(path).read(), path)
    inner, outer = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                (inner.add(parts[1]) if parts[0] == "paper" and len(parts) > 1 else outer.add(parts[0]))
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 1 or parts[0] == "paper":  # from .x import y / from paper.x import y
                rest = parts if node.level == 1 else parts[1:]
                if rest and rest[0]:
                    inner.add(rest[0])
                else:  # from . import x / from paper import x
                    inner.update(alias.name for alias in node.names)
            elif node.level == 0:
                outer.add(parts[0])
    return inner, outer


def find_cycle(graph):
    """A list of modules forming a cycle of `graph` ({module: set of modules}), or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def main():
    modules = sorted(f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py") and f != "__init__.py")
    layer = {m: i for i, names in enumerate(LAYERS) for m in names}
    declared = [m for names in LAYERS for m in names]
    check(sorted(declared) == modules and len(set(declared)) == len(declared),
          f"every module of the package is in exactly one layer (modules: {' '.join(modules)})")
    commands = {f[:-3] for f in os.listdir(SCRIPTS) if f.endswith(".py")}
    graph = {}
    for m in modules:
        inner, outer = imported(os.path.join(PACKAGE, m + ".py"))
        graph[m] = inner
        wrong = sorted(n for n in inner if n not in layer or layer[n] >= layer[m]) + sorted(outer & commands)
        check(not wrong, f"{m} (layer {layer[m]}) imports {' '.join(sorted(inner)) or 'no module of the package'}"
              + (f"; not allowed: {' '.join(wrong)}" if wrong else ""))
    check(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"] and find_cycle(
        {"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None, "the cycle finder finds a cycle, and only a cycle")
    cycle = find_cycle(graph)
    check(cycle is None, "the import graph has no cycle" + (f" ({' -> '.join(cycle)})" if cycle else ""))
    for f in sorted(commands):
        inner, _ = imported(os.path.join(SCRIPTS, f + ".py"))
        for m in sorted(inner):
            tree = ast.parse(open(os.path.join(PACKAGE, m + ".py")).read()) if m in modules else None
            has_main = tree is not None and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
            check(has_main, f"scripts/{f}.py calls paper/{m}.py, which has a main()")
    print("paper_imports: all checks passed")


if __name__ == "__main__":
    main()
