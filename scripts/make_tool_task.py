"""Arithmetic word problems where a calculator helps: the task of configs/examples/tools_qwen2.5.yaml.

  python3 scripts/make_tool_task.py OUT_DIR [--train N] [--test N] [--seed S]

Writes OUT_DIR/train.jsonl and OUT_DIR/test.jsonl, one record a line: {"question": "...",
"answer": "<integer>", "kind": "<template>"}. Each question takes a product of a four-digit and a
three-digit number and one more step (a difference, a whole division, a remainder, a second
product), sizes a small model rarely gets right in its head and a Python call always does. The same
seed writes the same files; train and test never share a question.
"""
import argparse
import json
import os
import random

TEMPLATES = {
    "left": ("A warehouse holds {a} crates with {b} bottles in each. It ships {c} bottles. "
             "How many bottles are left?", lambda a, b, c: a * b - c),
    "boxes": ("A factory makes {a} parts an hour for {b} hours and packs them in boxes of {c}. "
              "How many boxes does it fill completely?", lambda a, b, c: (a * b) // c),
    "cost": ("Each of {c} schools orders {a} books at {b} cents each. What do the orders cost "
             "in cents, all together?", lambda a, b, c: a * b * c),
    "remainder": ("{a} marbles are shared into bags of {b}, and the full bags are stacked in rows "
                  "of {c}. How many full bags are in the last, unfinished row?", lambda a, b, c: (a // b) % c),
}


def record(rng, kind):
    text, answer = TEMPLATES[kind]
    a, b = rng.randint(1000, 9999), rng.randint(100, 999)
    c = rng.randint(10, 99) if kind != "left" else rng.randint(1000, a * b // 2)
    return {"question": text.format(a=a, b=b, c=c), "answer": str(answer(a, b, c)), "kind": kind}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=2000)
    p.add_argument("--test", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.train < 1 or a.test < 1:
        p.error("--train and --test must be at least 1")
    rng = random.Random(a.seed)
    kinds = sorted(TEMPLATES)
    seen, rows = set(), []
    while len(rows) < a.train + a.test:
        r = record(rng, kinds[len(rows) % len(kinds)])
        if r["question"] not in seen:
            seen.add(r["question"])
            rows.append(r)
    os.makedirs(a.out_dir, exist_ok=True)
    for name, part in (("train", rows[:a.train]), ("test", rows[a.train:])):
        with open(os.path.join(a.out_dir, name + ".jsonl"), "w", encoding="utf-8") as f:
            for r in part:
                f.write(json.dumps(r) + "\n")
    print(f"{a.train} train and {a.test} test records in {a.out_dir}")


if __name__ == "__main__":
    main()
