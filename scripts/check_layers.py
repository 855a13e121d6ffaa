#!/usr/bin/env python3
"""The include graph against the layers docs/BUILD.md states ("Architecture"): a file of component A
may include a header of component B only when B's layer is at or below A's. Any include that runs
back up fails, unless listed in KNOWN_BACK_EDGES (empty), and so does a listed one that is gone.

Usage: scripts/check_layers.py [--print]   (--print: the component graph and every back edge)"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Bottom to top; components in one layer may include each other.
LAYERS = [
    ["common"],
    ["io", "log", "precision"],
    ["tokenizer", "model"],
    ["data", "reward"],
    ["rollout", "algo", "dist"],
    ["config"],
    ["train"],
    ["cli", "bench"],
]
LAYER = {c: i for i, layer in enumerate(LAYERS) for c in layer}

# (file, included header) pairs allowed to run back up, each with why: none. A new one fails; the
# fix is to move the shared piece down (as common/value_names.h and config/grpo_config.h were).
KNOWN_BACK_EDGES = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"(unstuck/([a-z_]+)/[A-Za-z0-9_]+\.h)"', re.M)


def component(path):
    parts = path.split("/")
    return parts[2] if parts[0] == "include" else parts[1]


def includes():
    """(file, header, from component, to component) for every include of another component's header."""
    out = []
    for top in ("include/unstuck", "src"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.relpath(os.path.join(folder, name), ROOT)
                src = component(path)
                with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                    for m in INCLUDE.finditer(f.read()):
                        if m.group(2) != src:
                            out.append((path, m.group(1), src, m.group(2)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print the component graph and every back edge")
    a = ap.parse_args(argv)
    problems, back = [], set()
    for path, header, src, dst in includes():
        for c in (src, dst):
            if c not in LAYER:
                problems.append(f"{path}: component '{c}' is in no layer (add it to LAYERS and docs/BUILD.md)")
        if src in LAYER and dst in LAYER and LAYER[dst] > LAYER[src]:
            back.add((path, header))
            if (path, header) not in KNOWN_BACK_EDGES:
                problems.append(f"{path} includes {header}: {src} (layer {LAYER[src]}) may not include {dst} "
                                f"(layer {LAYER[dst]}, above it)")
    for path, header in sorted(KNOWN_BACK_EDGES - back):
        problems.append(f"{path} no longer includes {header}: remove it from KNOWN_BACK_EDGES")
    if a.print:
        graph = {}
        for _, _, src, dst in includes():
            graph.setdefault(src, set()).add(dst)
        for c in sorted(graph, key=lambda c: (LAYER.get(c, 99), c)):
            print(f"{c} (layer {LAYER.get(c, '?')}) -> {', '.join(sorted(graph[c]))}")
        for path, header in sorted(back):
            print(f"back edge: {path} -> {header}")
    for p in problems:
        print("ERROR", p)
    print(f"check_layers.py: {len(back)} includes run back up the layers, all known; "
          f"{len(problems)} problems" if not problems else f"check_layers.py: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
