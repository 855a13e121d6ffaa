#!/usr/bin/env python3
"""The figures of a GPU lease, rendered from what `scripts/gpu_check.sh` left behind.

  scripts/gpu_lease.py --table [--dir docs/results/gpu]

Reads the lease's committed logs and JSON in DIR: gpu_check.log (the device check: device, elapsed
seconds, the CUDA and NCCL test counts, the 20-step GRPO run on cuda against cpu), bench_step_tiny.json
(its `bench step --device cuda`), paper_gpu_run.log (`--paper-only`: the SFT base and the sweep) and
bench_step_27m.json (`bench step` on that base). Prints the Markdown table docs/BUILD.md shows, so no
figure of the lease is typed by hand; `scripts/reports.py --check` renders it again."""
import argparse
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(path):
    with open(path) as f:
        return f.read()


def passed(log, after):
    """The `[  PASSED  ] N tests.` counts of the gtest runs in the section that starts with `after`."""
    section = log.split(after, 1)[1].split("\n[gpu_check", 1)[0]
    ran = sum(int(n) for n in re.findall(r"\[==========\] (\d+) tests? from", section))
    ok = sum(int(n) for n in re.findall(r"\[  PASSED  \] (\d+) tests?\.", section))
    return ok, ran


def cuda_vs_cpu(log):
    """Steps of the cuda-vs-cpu table, how many agree in every metric but the step time as printed, and
    the cells that differ ("step 1 kl_ref_k3 -9.0768e-10 / 0")."""
    lines = log.split("cuda vs cpu, step by step\n", 1)[1].split("\ntolerances:", 1)[0].splitlines()
    names = lines[0].split()[1:-2]  # the metric columns, without step_seconds and its (cuda/cpu) note
    rows = [line.split() for line in lines[1:] if line.strip()]
    differ = [f"step {r[0]} {name} {a} on cuda, {b} on cpu" for r in rows
              for name, (a, b) in zip(names, (cell.split("/") for cell in r[1:-1])) if a != b]
    same = sum(1 for r in rows if all(a == b for a, b in (cell.split("/") for cell in r[1:-1])))
    return same, len(rows), differ


def check_figures(d):
    log = read(os.path.join(d, "gpu_check.log"))
    device = re.search(r"^device: (.+)$", log, re.M).group(1)
    torch = re.search(r"torch (\S+) \(CUDA ([\d.]+)\)", log)
    seconds = int(re.search(r"\[gpu_check\s+(\d+)s\] all checks passed", log).group(1))
    if "\ngpu_check: OK" not in log:
        sys.exit(f"gpu_lease.py: {d}/gpu_check.log does not end with gpu_check: OK")
    kernels = passed(log, "CUDA kernel tests")
    model = passed(log, "model, sampling and SFT on CUDA")
    nccl = passed(log, "NCCL tests")
    same, steps, differ = cuda_vs_cpu(log)
    tiny = json.loads(read(os.path.join(d, "bench_step_tiny.json")))
    modes = [m for m in ("fp32", "bf16", "bf16_sr", "fp16") if m in tiny]
    return device, torch, [
        ("`gpu_check.sh --prebuilt .gpu/bin`", f"`gpu_check: OK` in {seconds} s", "gpu_check.log"),
        ("CUDA kernel tests (bits vs the CPU reference)", f"{kernels[0]}/{kernels[1]} passed", "gpu_check.log"),
        ("model, sampling and SFT on CUDA vs the CPU", f"{model[0]}/{model[1]} passed", "gpu_check.log"),
        ("NCCL tests", f"{nccl[0]}/{nccl[1]} passed", "gpu_check.log"),
        ("GRPO, `run.device=cuda` against `cpu`",
         f"{same} of {steps} steps print the same reward, accuracy, entropy, grad norm and KL"
         + (f" (differs: {'; '.join(differ)})" if differ else ""), "gpu_check.log"),
        (f"`bench step --device cuda`, {int(tiny['params']):,}-parameter check model",
         "step " + ", ".join(f"{m} {tiny[m]['step_seconds']:.3f} s" for m in modes), "bench_step_tiny.json"),
    ]


def paper_figures(d):
    log = read(os.path.join(d, "paper_gpu_run.log"))
    total = int(re.search(r"\[gpu_check\s+(\d+)s\] paper GPU preset done", log).group(1))
    sft = re.search(r"sft: \d+ train / \d+ eval records, model (\d+) params", log)
    done = re.search(r"sft done in (\d+)s: greedy test accuracy ([\d.]+)", log)
    steps = re.search(r"greedy test accuracy [\d.]+ after (\d+) steps", log).group(1)
    rates = [int(x) for x in re.findall(r"\| (\d+) tok/s \|", log)]
    sweep = re.search(r"all (\d+) runs finished in (\d+m\d+s)", log)
    step = json.loads(read(os.path.join(d, "bench_step_27m.json")))
    modes = [m for m in ("fp32", "bf16", "bf16_sr", "fp16") if m in step]
    return [
        ("`gpu_check.sh --paper-only` (the paper's GPU preset end to end)", f"{total} s", "paper_gpu_run.log"),
        (f"its SFT base ({int(sft.group(1)):,} parameters, {steps} steps on the GPU)",
         f"{done.group(1)} s, median {statistics.median(rates):,.0f} tok/s, greedy test accuracy {done.group(2)}",
         "paper_gpu_run.log"),
        ("its GRPO sweep", f"{sweep.group(1)} runs in {sweep.group(2)}", "paper_gpu_run.log"),
        (f"`bench step --device cuda` on that base ({step['prompts_per_step']} x {step['group_size']} rollouts)",
         "step " + ", ".join(f"{m} {step[m]['step_seconds']:.3f} s" for m in modes) + "; rollout " +
         ", ".join(f"{m} {step[m]['rollout_seconds']:.3f} s" for m in modes) + "; model FLOP utilization " +
         ", ".join(f"{m} {100 * step[m]['model_flop_utilization']:.1f}%" for m in modes),
         "bench_step_27m.json"),
    ]


def table(d):
    device, torch, rows = check_figures(d)
    rows += paper_figures(d)
    rel = os.path.relpath(d, os.path.join(ROOT, "docs"))
    out = [f"One {device}, torch {torch.group(1)} (CUDA {torch.group(2)}); `scripts/gpu_lease.py --table` "
           f"of the files in [{rel}/]({rel}/):", "",
           "| what ran | figure | file |", "|---|---|---|"]
    out += [f"| {what} | {figure} | [{f}]({rel}/{f}) |" for what, figure, f in rows]
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true", help="print the Markdown table")
    p.add_argument("--dir", default=os.path.join(ROOT, "docs", "results", "gpu"), help="the lease's files")
    a = p.parse_args()
    if not a.table:
        p.error("give --table")
    sys.stdout.write(table(os.path.abspath(a.dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
