#!/usr/bin/env python3
"""`precision.compute: auto`'s probe as committed data, and the table docs/PRECISION.md shows from it.

  scripts/bench_compute.py --run docs/results/bench-compute/probe.json [--runs N] [--threads T]
  scripts/bench_compute.py --table DATA.json

Each run is `unstuck config check --json` of configs/sft/countdown.yaml with `precision.mode=bf16
precision.compute=auto` and a model shape's keys: the plan resolves `auto` with the probe the run's
start-up would (train::resolve_compute) and reports its BF16 and FP32 times (`compute.probe`). The
data keeps every run's probe with the command, the CPU (lscpu's model name and its BF16 / AMX flags),
the commit and the date; the table gives the median and range over the runs and what `auto` picked."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_meta import run_or_table, commit, lscpu, write_data  # noqa: E402
CONFIG = "configs/sft/countdown.yaml"

# (name shown, the model keys set on top of CONFIG's model section)
SHAPES = [
    ("countdown default (dim 128, 4 layers, SwiGLU 384)", []),
    ("Qwen2.5-0.5B's layers (24 of dim 896, 14/2 heads, SwiGLU 4864, q/k/v biases)",
     ["model.family=qwen2", "model.dim=896", "model.n_heads=14", "model.n_kv_heads=2", "model.ffn_dim=4864",
      "model.qkv_bias=true", "model.n_layers=24"]),
    ("test model (dim 32, 4 heads, SwiGLU 64, 2 layers)",
     ["model.dim=32", "model.n_heads=4", "model.n_kv_heads=4", "model.ffn_dim=64", "model.n_layers=2"]),
]


def probe_once(binary, keys, threads):
    cmd = [binary, "config", "check", "--config", CONFIG, "--command", "sft", "--json", "precision.mode=bf16",
           "precision.compute=auto", f"precision.threads={threads}"] + keys
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"bench_compute.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-800:]}")
    compute = json.loads(r.stdout)["compute"]
    if "probe" not in compute:
        sys.exit(f"bench_compute.py: {' '.join(cmd)}: no probe in the plan's compute record: {compute}")
    return cmd, compute, seconds


def run(a):
    binary = os.environ.get("UNSTUCK_BINARY") or os.path.join(ROOT, "build", "unstuck")
    shapes = []
    for name, keys in SHAPES:
        runs = []
        for i in range(a.runs):
            cmd, compute, seconds = probe_once(binary, keys, a.threads)
            runs.append({"native_ms": compute["probe"]["native_ms"], "fp32_ms": compute["probe"]["fp32_ms"],
                         "resolved": compute["resolved"], "reason": compute["reason"], "check_seconds": seconds})
            print(f"[bench_compute] {name}: run {i + 1}/{a.runs}: bf16 {runs[-1]['native_ms']:.1f} ms, "
                  f"fp32 {runs[-1]['fp32_ms']:.1f} ms -> {compute['resolved']}", file=sys.stderr)
        shapes.append({"shape": name, "keys": keys, "rows": compute["probe"]["rows"],
                       "repeats": compute["probe"]["repeats"], "fp32_margin": compute["probe"]["fp32_margin"],
                       "runs": runs})
    cpu, all_flags = lscpu()
    flags = sorted(f for f in all_flags if f in ("avx512f", "avx512_bf16", "amx_bf16"))
    shown = (f"build/unstuck config check --config {CONFIG} --command sft --json precision.mode=bf16 "
             f"precision.compute=auto precision.threads={a.threads} <shape's model keys>")
    data = {"command": shown, "script": f"scripts/bench_compute.py --run {a.run} --runs {a.runs} --threads {a.threads}",
            "cpu": cpu, "cpu_flags": flags, "cores": os.cpu_count(), "load_average": os.getloadavg()[0],
            "threads": a.threads, "commit": commit(), "date": datetime.date.today().isoformat(), "shapes": shapes}
    write_data(a.run, data)
    print(table(data, os.path.relpath(os.path.abspath(a.run), ROOT)), end="")


def spread(values, unit=" ms"):
    mid = statistics.median(values)
    f = (lambda x: f"{x:.1f}") if mid >= 10 else (lambda x: f"{x:.2f}")
    if len(values) == 1:
        return f + unit
    return f"{f(mid)}{unit} ({f(min(values))}-{f(max(values))})"


def table(data, path):
    flags = ", ".join(data["cpu_flags"]) or "no avx512_bf16"
    first = data["shapes"][0]
    out = [f"`{data['script']}` ({path}): {data['cpu']} ({flags}), {data['cores']} cores, "
           f"{data['threads']} thread(s), load average {data['load_average']:.1f} at the start, commit "
           f"{data['commit']}, {data['date']}; each probe {first['repeats']} interleaved passes on "
           f"{first['rows']} rows, the fastest counting; median (range) over {len(first['runs'])} runs:", "",
           "| model shape | bf16 | fp32 | fp32 / bf16 | auto picks | whole `config check` |",
           "|-------------|------|------|-------------|------------|----------------------|"]
    for s in data["shapes"]:
        native = [r["native_ms"] for r in s["runs"]]
        fp32 = [r["fp32_ms"] for r in s["runs"]]
        ratio = statistics.median(f / n for f, n in zip(fp32, native))
        picks = sorted(set(r["resolved"] for r in s["runs"]))
        check = statistics.median(r["check_seconds"] for r in s["runs"])
        out.append(f"| {s['shape']} | {spread(native, '')} | {spread(fp32, '')} | {ratio:.2f} | "
                   f"{' / '.join(picks)} | {check:.1f} s |")
    out.append("")
    out.append("bf16 and fp32: the probe's time in ms, each product of one block and the LM head forward and "
               "both backward products, counted as often as a forward uses it (times the layer count); the LM "
               "head is the countdown tokenizer's 34 ids in every row. The last column: the median wall time of "
               "the whole command (the probe, the plan and the process's start).")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="run the probes and write the data here")
    p.add_argument("--runs", type=int, default=3, help="probes per shape (default 3)")
    p.add_argument("--threads", type=int, default=1, help="precision.threads (default 1)")
    return run_or_table(p, run, lambda data, path, a: table(data, path))


if __name__ == "__main__":
    sys.exit(main())
