#!/usr/bin/env python3
"""The fused CPU sampler against libtorch's ops as committed data, and the table docs/PERFORMANCE.md
shows from it.

  scripts/bench_sample.py --run docs/results/bench-sample/sample.json [--rows 8,64] [--threads 1,2]
  scripts/bench_sample.py --table DATA.json

Each measurement is `unstuck bench sample --json --rows R --threads T` (Qwen2's 151,936 logits per
row, language-model-like values; best of 20 interleaved rounds after a warm-up): one decode step's
draw by the fused kernel (src/rollout/sample_kernel.h) and by the five libtorch ops it replaced, in
the same run. The data keeps every measurement with the command, the CPU, the commit and the date."""
import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_meta import run_or_table, commit, cpu_name, write_data  # noqa: E402


def run(a):
    binary = os.environ.get("UNSTUCK_BINARY") or os.path.join(ROOT, "build", "unstuck")
    measurements = []
    for rows in a.rows.split(","):
        for threads in a.threads.split(","):
            cmd = [binary, "bench", "sample", "--json", "--rows", rows, "--threads", threads]
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if r.returncode != 0:
                sys.exit(f"bench_sample.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-800:]}")
            measurements.append(json.loads(r.stdout))
            print(f"[bench_sample] rows {rows}, threads {threads}: done", file=sys.stderr)
    data = {"command": "build/unstuck bench sample --json --rows R --threads T",
            "script": f"scripts/bench_sample.py --run {a.run} --rows {a.rows} --threads {a.threads}",
            "cpu": cpu_name(), "cores": os.cpu_count(), "load_average": os.getloadavg()[0], "commit": commit(),
            "date": datetime.date.today().isoformat(), "measurements": measurements}
    write_data(a.run, data)
    print(table(data, os.path.relpath(os.path.abspath(a.run), ROOT)), end="")


def table(data, path):
    m0 = data["measurements"][0]
    lines = [f"{data['script'].split(' --run ')[0]} --run {path}",
             f"{data['cpu']} ({m0['simd']} kernels), {data['cores']} cores, commit {data['commit']}, {data['date']}; "
             f"{m0['vocab']} logits per row on {m0['device']}, best of {m0['repeats']} rounds; ms per draw of all rows",
             f"{'rows':>5} {'threads':>7}  {'setting':<28} {'kernel ms':>10} {'ops ms':>9} {'ops/kernel':>10}"]
    for m in data["measurements"]:
        for s in m["settings"]:
            lines.append(f"{m['rows']:>5} {m['threads']:>7}  {s['setting']:<28} {s['kernel_ms']:>10.3f} "
                         f"{s['ops_ms']:>9.3f} {s['ops_over_kernel']:>10.2f}")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", metavar="OUT.json", help="measure and write the data")
    p.add_argument("--rows", default="8,64", help="rows per step, comma-separated")
    p.add_argument("--threads", default="1,2", help="threads, comma-separated")
    return run_or_table(p, run, lambda data, path, a: table(data, path))


if __name__ == "__main__":
    sys.exit(main())
