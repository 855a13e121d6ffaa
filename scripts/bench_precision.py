#!/usr/bin/env python3
"""`unstuck bench precision` as committed data and the table docs/PRECISION.md shows from it.

  scripts/bench_precision.py --run docs/results/bench-precision/avx512.json [--elements N] [--repeats R]
                             [--threads T] [--simd scalar]     # runs the benchmark, writes the data
  scripts/bench_precision.py --table DATA.json [DATA.json ...]  # the Markdown table of each data file

The data holds the benchmark's own JSON (`result`) with the command, the CPU (lscpu's model name),
the commit of the checkout and the date; the table names them, so every figure says where it came from."""
import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_meta import run_or_table, commit, cpu_name, write_data  # noqa: E402

# (key, what the row shows, target at all threads)
ROWS = [
    ("copy_gbps", "copy_gbps (memcpy)", ""),
    ("sr_bf16_gbps", "sr_bf16_gbps", ""),
    ("rn_bf16_gbps", "rn_bf16_gbps", ""),
    ("sr_fp16_gbps", "sr_fp16_gbps", ""),
    ("torch_rn_bf16_gbps", "torch_rn_bf16_gbps (`.copy_` into a BF16 tensor)", ""),
    ("rn_fp8_gbps", "rn_fp8_gbps (the FP8 pass: BF16 kernel, then the channels)", ""),
    ("sr_fp8_gbps", "sr_fp8_gbps", ""),
    ("fp8_amax_gbps", "fp8_amax_gbps (the channels' maxima)", ""),
    ("sr_vs_copy", "sr_vs_copy", ">= 0.8"),
    ("sr_vs_torch_rn", "sr_vs_torch_rn", ">= 1.0"),
    ("sr_vs_unfused", "sr_vs_unfused (randint + add + mask + shift as libtorch ops)", ">= 4"),
    ("adamw_fused_vs_unfused", "adamw_fused_vs_unfused (torch::optim::AdamW + an SR pass)", ">= 2.5"),
    ("sr_fp8_vs_sr_bf16", "sr_fp8_vs_sr_bf16", ""),
]




def run(a):
    binary = os.environ.get("UNSTUCK_BINARY") or os.path.join(ROOT, "build", "unstuck")
    cmd = [binary, "bench", "precision", "--json", "--elements", str(a.elements), "--repeats", str(a.repeats),
           "--threads", str(a.threads)]
    env = dict(os.environ)
    if a.simd:
        env["UNSTUCK_SIMD"] = a.simd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"bench_precision.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-800:]}")
    shown = ("UNSTUCK_SIMD=" + a.simd + " " if a.simd else "") + "build/unstuck " + " ".join(cmd[1:])
    data = {"command": shown, "cpu": cpu_name(), "cores": os.cpu_count(), "commit": commit(),
            "date": datetime.date.today().isoformat(), "result": json.loads(r.stdout)}
    write_data(a.run, data)
    print(table(data, os.path.relpath(os.path.abspath(a.run), ROOT)), end="")


def fmt(x):
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def table(data, path):
    r = data["result"]
    one, every = r["at_1_thread"], r["at_all_threads"]
    out = [f"`{data['command']}` ({path}): {data['cpu']}, {data['cores']} cores, SIMD {r['simd']}, "
           f"{r['elements']} elements, best of {r['repeats']}, commit {data['commit']}, {data['date']}.", "",
           f"| metric | 1 thread | {r['threads']} threads | target (all threads) |",
           "|--------|----------|-----------|----------------------|"]
    for key, what, target in ROWS:
        if key in one and key in every:
            out.append(f"| {what} | {fmt(one[key])} | {fmt(every[key])} | {target} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="run the benchmark and write its data here")
    ap.add_argument("--elements", type=int, default=67108864)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--simd", default="", help="UNSTUCK_SIMD for the run (e.g. scalar)")
    return run_or_table(ap, run, lambda data, path, a: table(data, path), argv)


if __name__ == "__main__":
    sys.exit(main())
