#!/usr/bin/env python3
"""The reward path's throughput as committed data, and the tables docs/TASKS.md shows from it.

  scripts/bench_reward.py --run docs/results/bench-reward/reward.json [--rounds R]
  scripts/bench_reward.py --table DATA.json --part embedded|commands

Two measurements in one file, with the CPU (lscpu's model name), the commit and the date:

- `embedded`: `unstuck bench reward --json` (the math verifier and math-verify on the graded corpus,
  the worst adversarial completion, a verl `compute_score` on 1 and 2 reward workers against the
  built-in verifier, the code verifier on 1 and 2 sandboxes).
- `commands`: whole `unstuck reward score --config C --input F` commands, as a user runs them
  (reading and writing the JSONL, starting the workers): GSM8K-style records scored by the built-in
  math verifier and by a regex `compute_score` in verl's form on 1, 2 and 4 workers, and by the same
  function waiting 0.5 ms per completion (a remote check, say); R rounds of every command,
  interleaved, the best and the median wall time of each."""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_meta import run_or_table, commit, cpu_name, write_data  # noqa: E402

FUNCTION = '''import re
import time

WAIT_S = {wait}


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """GSM8K-style: the last number in the last <answer>...</answer> against the ground truth."""
    if WAIT_S:
        time.sleep(WAIT_S)
    tags = re.findall(r"<answer>(.*?)</answer>", solution_str, re.S)
    numbers = re.findall(r"-?\\d+(?:\\.\\d+)?", tags[-1].replace(",", "")) if tags else []
    if not numbers:
        return 0.0
    return 1.0 if float(numbers[-1]) == float(ground_truth) else 0.1
'''

# (row label, completions, batch size, wait per completion in s, worker counts; None: the built-in verifier)
CASES = [
    ("regex", 20000, 256, 0.0, [None, 1, 2, 4]),
    ("regex+wait", 4000, 100, 0.0005, [1, 2, 4]),
]




def records(n):
    """GSM8K-style records with a completion each: a third right, a third wrong, a third unformatted."""
    out = []
    for i in range(n):
        answer = str(17 * i % 9973)
        kind = i % 3
        body = f"We have {i} apples and add {answer} more, so "
        completion = (body + f"<answer>{answer}</answer>" if kind == 0 else
                      body + f"<answer>{int(answer) + 1}</answer>" if kind == 1 else body + answer)
        out.append({"prompt": f"Question {i}: how many?", "answer": answer, "completion": completion})
    return out


def write_case(folder, label, n, batch, wait, python, workers):
    name = f"{label}-{'builtin' if workers is None else f'w{workers}'}"
    path = os.path.join(folder, name + ".yaml")
    reward = {"verifier": "math"} if workers is None else {
        "function": {"path": os.path.join(folder, f"{label}.py"), "name": "compute_score", "style": "verl",
                     "python": python, "workers": workers, "batch_size": batch}}
    with open(path, "w") as f:
        json.dump({"data": {"task": "math"}, "reward": reward}, f)  # JSON is YAML
    with open(os.path.join(folder, f"{label}.py"), "w") as f:
        f.write(FUNCTION.format(wait=wait))
    inputs = os.path.join(folder, f"{label}-{n}.jsonl")
    if not os.path.exists(inputs):
        with open(inputs, "w") as f:
            for r in records(n):
                f.write(json.dumps(r) + "\n")
    return name, path, inputs


def timed(cmd):
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"bench_reward.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-1500:]}")
    return seconds


def commands(binary, python, rounds):
    folder = tempfile.mkdtemp(prefix="bench_reward_")
    cases = []
    for label, n, batch, wait, workers in CASES:
        for w in workers:
            name, config, inputs = write_case(folder, label, n, batch, wait, python, w)
            out = os.path.join(folder, name + ".out.jsonl")
            cmd = [binary, "reward", "score", "--config", config, "--input", inputs, "--output", out]
            cases.append({"case": label, "completions": n, "batch_size": batch, "wait_ms": wait * 1e3,
                          "workers": w, "cmd": cmd, "seconds": []})
    for c in cases:  # one untimed round: the interpreter's and the binary's files in the page cache
        timed(c["cmd"])
    for r in range(rounds):
        for c in cases:
            c["seconds"].append(timed(c["cmd"]))
        print(f"[bench_reward] round {r + 1}/{rounds}: " +
              ", ".join(f"{c['case']} {c['workers'] or 'builtin'} {c['seconds'][-1]:.2f} s" for c in cases),
              file=sys.stderr)
    for c in cases:
        with open(c["cmd"][4]) as f:
            c["reward_config"] = json.load(f)["reward"]
        c["reward_config"].get("function", {}).pop("path", None)
        c["reward_config"].get("function", {}).pop("python", None)
        del c["cmd"]
    shutil.rmtree(folder)
    return {"function": FUNCTION.format(wait="WAIT"), "rounds": rounds, "cases": cases}


def run(a):
    binary = os.environ.get("UNSTUCK_BINARY") or os.path.join(ROOT, "build", "unstuck")
    python = os.path.join(ROOT, ".venv", "bin", "python")
    embedded_cmd = [binary, "bench", "reward", "--json", "--python", python, "--code-completions",
                    str(a.code_completions)]
    r = subprocess.run(embedded_cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"bench_reward.py: {' '.join(embedded_cmd)} exited {r.returncode}: {r.stderr[-1500:]}")
    embedded = json.loads(r.stdout)
    print("[bench_reward] bench reward done", file=sys.stderr)
    data = {"script": f"scripts/bench_reward.py --run {os.path.relpath(os.path.abspath(a.run), ROOT)} "
                      f"--rounds {a.rounds} --code-completions {a.code_completions}",
            "embedded_command": "build/unstuck " + " ".join(embedded_cmd[1:]).replace(python, ".venv/bin/python"),
            "cpu": cpu_name(), "cores": os.cpu_count(), "load_average": os.getloadavg()[0], "commit": commit(),
            "date": datetime.date.today().isoformat(), "embedded": embedded,
            "commands": commands(binary, python, a.rounds)}
    write_data(a.run, data)
    path = os.path.relpath(os.path.abspath(a.run), ROOT)
    print(table(data, path, "embedded") + "\n" + table(data, path, "commands"), end="")


def where(data, path):
    return (f"{data['cpu']}, {data['cores']} cores, load average {data['load_average']:.1f} at the start, "
            f"commit {data['commit']}, {data['date']}; data: {path}")


def table_embedded(data, path):
    e = data["embedded"]
    w = e["worst_case"]
    out = [f"`{data['embedded_command']}` ({where(data, path)}):", "",
           "| what | completions | completions/s | against |", "|---|---|---|---|",
           f"| math verifier, graded corpus | {e['math']['completions']} | {e['math']['completions_per_s']:,.0f} | "
           f"math-verify {e['math_verify']['completions_per_s']:,.1f} ({e['speedup_vs_math_verify']:,.0f}x) |",
           f"| countdown verifier | {e['countdown']['completions']} | {e['countdown']['completions_per_s']:,.0f} | |"]
    f = e["function"]
    for r in f["runs"]:
        out.append(f"| verl `compute_score` (GSM8K regex), {r['workers']} worker(s) | {f['completions']} | "
                   f"{r['completions_per_s']:,.0f} | built-in verifier {f['builtin_completions_per_s']:,.0f} "
                   f"({r['vs_builtin']:.2f}x) |")
    c = e["code"]
    for r in c["runs"]:
        out.append(f"| code verifier, {r['workers']} sandbox(es), {c['tests_per_completion']} asserts each | "
                   f"{c['completions']} | {r['completions_per_s']:.1f} | |")
    out += ["", f"Worst adversarial completion: {w['worst_ms']:.2f} ms ({w['completions']} completions of "
                f"{w['completion_chars']} characters, answers at the {w['answer_chars']}-character limit; the "
                f"slowest begins `{w['worst_answer_prefix']}`); human agreement on the corpus "
                f"{100 * e['math']['human_agreement']:.2f}% (math-verify "
                f"{100 * e['math_verify']['human_agreement']:.2f}%), {e['math']['false_positives']} false positives."]
    return "\n".join(out) + "\n"


def table_commands(data, path):
    c = data["commands"]
    out = [f"Whole `unstuck reward score --config C --input F --output O` commands, {c['rounds']} interleaved "
           f"rounds after an untimed one, best (median) wall seconds ({where(data, path)}):", "",
           "| function | completions | built-in math verifier | 1 worker | 2 workers | 4 workers |",
           "|---|---|---|---|---|---|"]
    labels = {"regex": "a regex GSM8K check in verl's form", "regex+wait": "the same plus a 0.5 ms wait"}
    for case in dict.fromkeys(x["case"] for x in c["cases"]):
        rows = [x for x in c["cases"] if x["case"] == case]
        cell = {x["workers"]: f"{min(x['seconds']):.2f} s ({statistics.median(x['seconds']):.2f})" for x in rows}
        out.append(f"| {labels[case]} (`batch_size: {rows[0]['batch_size']}`) | {rows[0]['completions']} | "
                   f"{cell.get(None, '')} | {cell.get(1, '')} | {cell.get(2, '')} | {cell.get(4, '')} |")
    return "\n".join(out) + "\n"


def table(data, path, part):
    return table_embedded(data, path) if part == "embedded" else table_commands(data, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="run the benchmarks and write the data here")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds of the reward score commands (default 3)")
    p.add_argument("--code-completions", type=int, default=96, help="bench reward --code-completions (default 96)")
    p.add_argument("--part", choices=["embedded", "commands"], default="embedded", help="which table (--table)")
    return run_or_table(p, run, lambda data, path, a: table(data, path, a.part))


if __name__ == "__main__":
    sys.exit(main())
