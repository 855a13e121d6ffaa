#!/usr/bin/env python3
"""Sticking of LoRA adapters per projection and factor over a compare.py sweep, as committed data.

  scripts/lora_sticking.py --run runs/compare-lora --out docs/results/lora/sticking.json
  scripts/lora_sticking.py --table docs/results/lora/sticking.json

For each arm (a folder of the sweep holding seed<N>/metrics.jsonl) and each key of
sticking_frac_per_module ("q_proj.lora_A", ...): the mean over steps and seeds of the fraction of that
factor's compute elements the step's optimizer step left bit-identical; the same over all adapters
(sticking_frac); the final changed_from_start_frac; the mean training reward and the KL over the last
tenth of the steps, both averaged over seeds. --run writes them with the sweep's folder, seeds, steps,
the CPU (lscpu's model name), the commit and the date; --table prints the Markdown table of a data file
(docs/GRPO.md shows it; scripts/reports.py checks it).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from result_meta import run_or_table, commit, cpu_name, write_data  # noqa: E402
ORDER = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]




def reduce(sweep):
    arms = {}
    for arm in sorted(p for p in Path(sweep).iterdir() if p.is_dir()):
        rows = []
        for seed in sorted(arm.glob("seed*/metrics.jsonl")):
            steps = [json.loads(l) for l in seed.read_text().splitlines() if l.strip()]
            rows.append([s for s in steps if "sticking_frac_per_module" in s])
        if rows and all(rows):
            arms[arm.name] = rows
    if not arms:
        sys.exit(f"lora_sticking: no LoRA runs (sticking_frac_per_module) under {sweep}")
    keys = sorted({k for rows in arms.values() for r in rows for k in r[0]["sticking_frac_per_module"]},
                  key=lambda k: (ORDER.index(k.split(".")[0]) if k.split(".")[0] in ORDER else 99, k))
    out = {}
    for name, rows in arms.items():
        tail = max(1, len(rows[0]) // 10)
        out[name] = {
            "seeds": len(rows), "steps": len(rows[0]),
            "per_module": {k: statistics.mean(s["sticking_frac_per_module"][k] for r in rows for s in r) for k in keys},
            "all_adapters": statistics.mean(s["sticking_frac"] for r in rows for s in r),
            "changed_at_end": statistics.mean(r[-1]["changed_from_start_frac"] for r in rows),
            "mean_train_reward": statistics.mean(s["reward_mean"] for r in rows for s in r),
            "kl_at_end": statistics.mean(statistics.mean(s["kl_ref_exact"] for s in r[-tail:]) for r in rows),
        }
    return keys, out


def run(a):
    keys, arms = reduce(a.run)
    data = {"command": f"scripts/lora_sticking.py --run {a.run} --out {a.out}", "sweep": a.run, "cpu": cpu_name(),
            "commit": commit(), "date": datetime.date.today().isoformat(), "keys": keys, "arms": arms}
    write_data(a.out, data)
    sys.stdout.write(table(data, a.out))


def table(data, path):
    keys, arms = data["keys"], data["arms"]
    first = next(iter(arms.values()))
    out = [f"`{data['command']}` (the sweep's runs on {data['cpu']}, commit {data['commit']}, {data['date']}; "
           f"data: {path}): means over {first['steps']} steps and {first['seeds']} seed(s).", "",
           "| arm | " + " | ".join(f"`{k}`" for k in keys) +
           " | all adapters | changed from start (end) | mean train reward | KL at end |",
           "|---|" + "---|" * (len(keys) + 4)]
    for name, r in arms.items():
        out.append(f"| {name} | " + " | ".join(f"{r['per_module'][k]:.3f}" for k in keys) +
                   f" | {r['all_adapters']:.3f} | {r['changed_at_end']:.3f} | {r['mean_train_reward']:.3f} | "
                   f"{r['kl_at_end']:.2e} |")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="the sweep folder (compare.py --out) to reduce")
    p.add_argument("--out", help="with --run: the data file to write")
    return run_or_table(p, lambda a: run(a) if a.out else p.error("--run SWEEP needs --out DATA"),
                        lambda data, path, a: table(data, path))


if __name__ == "__main__":
    sys.exit(main())
