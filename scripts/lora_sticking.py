#!/usr/bin/env python3
"""Sticking of LoRA adapters per projection and factor over a compare.py sweep (docs/RESULTS-lora.md).

  scripts/lora_sticking.py runs/compare-lora

For each arm (a folder of the sweep holding seed<N>/metrics.jsonl) and each key of
sticking_frac_per_module ("q_proj.lora_A", ...): the mean over steps and seeds of the fraction of that
factor's compute elements the step's optimizer step left bit-identical; and the same for the final
changed_from_start_frac. Prints a markdown table.
"""
import json
import statistics
import sys
from pathlib import Path

ORDER = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main(sweep):
    arms = {}
    for arm in sorted(p for p in Path(sweep).iterdir() if p.is_dir()):
        rows = []
        for seed in sorted(arm.glob("seed*/metrics.jsonl")):
            rows.append([json.loads(l) for l in seed.read_text().splitlines() if l.strip()])
        if rows and all("sticking_frac_per_module" in r[0] for r in rows):
            arms[arm.name] = rows
    if not arms:
        sys.exit(f"lora_sticking: no LoRA runs (sticking_frac_per_module) under {sweep}")
    keys = sorted({k for rows in arms.values() for r in rows for k in r[0]["sticking_frac_per_module"]},
                  key=lambda k: (ORDER.index(k.split(".")[0]) if k.split(".")[0] in ORDER else 99, k))
    print("| arm | " + " | ".join(f"`{k}`" for k in keys) + " | all adapters | changed from start (end) |")
    print("|---|" + "---|" * (len(keys) + 2))
    for name, rows in arms.items():
        cells = [statistics.mean(s["sticking_frac_per_module"][k] for r in rows for s in r) for k in keys]
        overall = statistics.mean(s["sticking_frac"] for r in rows for s in r)
        changed = statistics.mean(r[-1]["changed_from_start_frac"] for r in rows)
        print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cells) + f" | {overall:.3f} | {changed:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
