#!/usr/bin/env python3
"""PiSSA's start-up at the size people train: Unstuck's `lora.init: pissa` with a full SVD
(`lora.pissa_niter: 0`) and with a randomized one (`lora.pissa_niter: N`) against peft's
init_lora_weights "pissa" and "pissa_niter_N", on the same stand-in (scripts/scale_standin.py) and
machine, each in a fresh process, interleaved round by round.

  Unstuck  `unstuck train` for one tiny step (bench_scale.py's command; LoRA rank R, alpha 2R, on
           q/k/v/o/gate/up/down_proj), its run.json start-up stage "adapters": every adapted
           matrix's SVD, the residual base and the start adapters.
  peft     a process loads the same directory in FP32 with transformers and times
           get_peft_model(model, LoraConfig(r=R, lora_alpha=2R, the same modules, init_lora_weights=...)).

Printed: seconds (median and range over the rounds), the peak resident memory of each process
(wait4's ru_maxrss; Unstuck's covers the whole tiny run), and the ratio peft / Unstuck (> 1: Unstuck
faster). Installs nothing (peft and transformers from requirements.txt).

  scripts/bench_pissa.py                                        # Qwen2.5-0.5B, rank 16, niter 4
  scripts/bench_pissa.py --shape qwen2.5-1.5b --layers 4 --rounds 2
  scripts/bench_pissa.py --table A.json [B.json ...]            # saved --json reports as one markdown table
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bench_scale  # noqa: E402
import scale_standin  # noqa: E402


def peft_worker(a):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    t0 = time.perf_counter()
    get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0,
                                     target_modules=bench_scale.LORA_TARGETS, init_lora_weights=a.init))
    print(json.dumps({"seconds": time.perf_counter() - t0}))
    return 0


def stage_seconds(stages, name):
    return next((s["seconds"] for s in stages or [] if s.get("stage") == name), None)


def shape_label(rep):
    """"Qwen2.5-0.5B (24 layers)", or "Qwen2.5-7B, 1 layer" for a stand-in with fewer layers than the public config."""
    name = rep["shape"].replace("qwen", "Qwen").replace("llama", "Llama").replace("b", "B")
    if rep["layers"] == scale_standin.SHAPES[rep["shape"]]["num_hidden_layers"]:
        return f"{name} ({rep['layers']} layers)"
    return f"{name}, {rep['layers']} layer" + ("s" if rep["layers"] != 1 else "")


def markdown_table(reports):
    """The markdown of saved --json reports (docs/GRPO.md, "PiSSA"): seconds per cell, then the peaks and the CPU."""
    def secs(c):
        d = 1 if c["median"] >= 10 else 2
        return f"{c['median']:.{d}f} s ({c['min']:.{d}f}-{c['max']:.{d}f})"
    cells = reports[0]["cells"]
    setting = lambda c: c["unstuck"].split("lora.")[1].replace(" ", ": ")  # "pissa_niter: 4"
    head = "| shape |" + "".join(f" Unstuck `{setting(c)}` | peft `\"{c['peft']}\"` | ratio |" for c in cells)
    lines = [head, "|---|" + "---|---|---|" * len(cells)]
    for rep in reports:
        lines.append(f"| {shape_label(rep)} |" + "".join(
            f" {secs(c['unstuck_s'])} | {secs(c['peft_s'])} | {c['ratio']:.2f} |" for c in rep["cells"]))
    peaks = lambda rep, who: " / ".join(f"{c[who + '_peak_gib']:.2f}" for c in rep["cells"])
    machines = sorted({f"{rep['cpus']} cores of {rep['cpu']}" for rep in reports})
    lines += ["", "Peak resident memory of the whole process (" + " / ".join(c["peft"] for c in cells) + "): "
              + "; ".join(f"{shape_label(rep)}: Unstuck {peaks(rep, 'unstuck')} GiB, peft {peaks(rep, 'peft')} GiB"
                          for rep in reports)
              + ". Unstuck's covers a full tiny GRPO step, peft's the load and the initialization. Ratio: peft / "
              f"Unstuck (> 1: Unstuck faster). Measured on {' and '.join(machines)}, "
              + ", ".join(sorted({f"{rep['rounds']} rounds" for rep in reports})) + "."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(scale_standin.SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the public config")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--niter", type=int, default=4, help="the randomized SVD's subspace iterations")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--mode", default="bf16_sr", help="Unstuck's precision.mode")
    ap.add_argument("--unstuck", default=str(ROOT / "build/unstuck"))
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="print saved --json reports as a markdown table and exit")
    ap.add_argument("--worker", choices=["peft"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.table:
        sys.stdout.write(markdown_table([json.loads(Path(p).read_text()) for p in a.table]))
        return 0
    if a.worker:
        return peft_worker(a)
    if not Path(a.unstuck).exists():
        sys.exit(f"bench_pissa: {a.unstuck} not found (build it: scripts/setup.sh)")
    work = Path(tempfile.mkdtemp(prefix="unstuck_bench_pissa_"))
    try:
        print(f"[bench_pissa] building the {a.shape} stand-in", file=sys.stderr)
        s = scale_standin.build(str(work / "standin"), a.shape, a.layers)
        env = bench_scale.thread_env(a.threads)
        cells = []
        for niter, peft_init in ((0, "pissa"), (a.niter, f"pissa_niter_{a.niter}")):
            ours, theirs = [], []
            opts = argparse.Namespace(unstuck=a.unstuck, threads=a.threads, device="cpu", work="tiny",
                                      lora=a.rank, check_export=False, keep=False,
                                      unstuck_args=["lora.init=pissa", f"lora.pissa_niter={niter}"])
            for r in range(a.rounds):
                def unstuck():
                    print(f"[bench_pissa] pissa_niter {niter}: round {r + 1}/{a.rounds}, unstuck", file=sys.stderr)
                    res = bench_scale.Bench(opts, work, s).unstuck_train(a.mode, f"n{niter}_r{r}")
                    ours.append({"seconds": stage_seconds(res["startup_stages"], "adapters"), "peak": res["peak_bytes"]})
                def peft():
                    print(f"[bench_pissa] {peft_init}: round {r + 1}/{a.rounds}, peft", file=sys.stderr)
                    cmd = [sys.executable, __file__, "--worker", "peft", "--model", s["model"], "--init", peft_init,
                           "--rank", str(a.rank)]
                    log = work / f"peft_{peft_init}_{r}.log"
                    bench_scale.warm(s["model"])
                    rc, peak, _ = bench_scale.run_measured(cmd, log, env=env)
                    bench_scale.check(rc, cmd, log)
                    theirs.append({"seconds": bench_scale.last_json(log)["seconds"], "peak": peak})
                for fn in ((unstuck, peft) if r % 2 == 0 else (peft, unstuck)):
                    fn()
            cells.append({"unstuck": f"lora.pissa_niter {niter}", "peft": peft_init,
                          "unstuck_s": bench_scale.summarize([c["seconds"] for c in ours]),
                          "peft_s": bench_scale.summarize([c["seconds"] for c in theirs]),
                          "unstuck_peak_gib": max(c["peak"] for c in ours) / 2**30,
                          "peft_peak_gib": max(c["peak"] for c in theirs) / 2**30,
                          "ratio": statistics.median(t["seconds"] for t in theirs) /
                                   statistics.median(o["seconds"] for o in ours)})
        report = {"cpu": bench_scale.cpu_name(), "cpus": len(os.sched_getaffinity(0)), "shape": a.shape,
                  "layers": s.get("layers"), "params": s.get("params"), "rank": a.rank, "threads": a.threads,
                  "rounds": a.rounds, "cells": cells}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"PiSSA start-up: {a.shape} ({report['layers']} layers, {report['params']} params), rank {a.rank}, "
          f"7 projections, {report['cpus']} CPUs ({report['cpu']}), threads {a.threads or 'all'}, {a.rounds} round(s)")
    fmt = lambda c: f"{c['median']:.2f} s ({c['min']:.2f}-{c['max']:.2f})"
    for c in cells:
        print(f"{c['unstuck']:<20} {fmt(c['unstuck_s']):<24} peak {c['unstuck_peak_gib']:.2f} GiB | "
              f"peft {c['peft']:<16} {fmt(c['peft_s']):<24} peak {c['peft_peak_gib']:.2f} GiB | "
              f"ratio peft/unstuck {c['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
