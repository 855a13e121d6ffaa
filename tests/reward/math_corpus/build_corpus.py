"""Builds tests/reward/math_corpus.jsonl, the graded corpus of the math verifier, from the
hand-written pairs.tsv and heldout.tsv (gold answer, final answer, human verdict; each final answer is wrapped into
a completion, the wrapper chosen by position) and completions.tsv (whole completions), and records
math-verify's verdict on each pair when math-verify is installed (requirements-bench.txt).

    .venv/bin/python tests/reward/math_corpus/build_corpus.py

math-verify is given its best case: the hand-written final answer of a pair ("final_answer"), and
for a whole completion the content of its last <answer> tag, else the whole completion; answers
without $ or \\boxed go in as $answer$, the gold answer as $gold$ (math_verify_score.py).
"""
import json
import pathlib
import sys

from math_verify_score import math_verify_verdict

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE.parent / "math_corpus.jsonl"

# Reasoning before the final answer, with numbers of its own that must not be taken for it.
WRAPPERS = [
    "Let me compute step by step: 17 + 4 = 21, and 21 - 3 = 18 checks out.\n<answer>{a}</answer>",
    "Working through the cases 1, 2 and 3 gives the result.\nTherefore, the final answer is $\\boxed{{{a}}}$.",
    "First 12 * 3 = 36, then subtract 9.\n#### {a}",
    "After simplifying (2 steps, 40 seconds), the answer is {a}.",
]


def read_tsv(path):
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 4 or parts[1] not in "+-":
            sys.exit(f"{path}:{number}: expected category<TAB>+|-<TAB>gold<TAB>answer")
        rows.append(parts)
    return rows


def main():
    records = []
    pairs = read_tsv(HERE / "pairs.tsv") + read_tsv(HERE / "heldout.tsv")
    for i, (category, verdict, gold, answer) in enumerate(pairs):
        completion = WRAPPERS[i % len(WRAPPERS)].format(a=answer)
        records.append((category, verdict, gold, completion, answer))
    for category, verdict, gold, completion in read_tsv(HERE / "completions.tsv"):
        records.append((category, verdict, gold, completion.replace("\u23ce", "\n"), None))
    try:
        import math_verify  # noqa: F401
        have_math_verify = True
    except ImportError:
        have_math_verify = False
    with OUT.open("w", encoding="utf-8") as out:
        for n, (category, verdict, gold, completion, final_answer) in enumerate(records):
            row = {
                "task": "math",
                "prompt": f"corpus item {n}",
                "answer": gold,
                "completion": completion,
                "category": category,
                "final_answer": final_answer,
                "human": "correct" if verdict == "+" else "wrong",
                "math_verify": (math_verify_verdict(gold, completion, final_answer)
                                if have_math_verify else None),
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} graded pairs to {OUT}")


if __name__ == "__main__":
    main()
