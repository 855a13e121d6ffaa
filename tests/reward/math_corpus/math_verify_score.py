"""math-verify's verdict on a corpus row, and `unstuck bench reward`'s baseline: scores the rows of a
corpus JSONL (argument) with math-verify and prints one JSON object {"n", "seconds", "correct"}.

What math-verify sees: the row's "final_answer" when it has one, else the content of the last
<answer> tag, else the whole completion; text without $ or \\boxed is wrapped in $...$ (its LaTeX
extraction needs delimiters), and the gold answer goes in as $gold$.
"""
import json
import re
import sys
import time


def math_verify_input(completion, final_answer=None):
    if final_answer is not None:
        text = final_answer
    else:
        tags = re.findall(r"<answer>(.*?)</answer>", completion, flags=re.S)
        if not tags:
            return completion
        text = tags[-1]
    if "$" not in text and "\\boxed" not in text:
        text = f"${text}$"
    return text


def math_verify_verdict(gold, completion, final_answer=None):
    from math_verify import parse, verify

    try:
        return bool(verify(parse(f"${gold}$"), parse(math_verify_input(completion, final_answer))))
    except Exception:  # math-verify's own failures count as "not correct"
        return False


def main():
    rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
    math_verify_verdict("1", "1")  # import and first-call set-up are not timed
    start = time.perf_counter()
    correct = [math_verify_verdict(r["answer"], r["completion"], r.get("final_answer")) for r in rows]
    seconds = time.perf_counter() - start
    print(json.dumps({"n": len(rows), "seconds": seconds, "correct": correct}))


if __name__ == "__main__":
    main()
