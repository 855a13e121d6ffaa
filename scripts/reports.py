#!/usr/bin/env python3
"""Every report or table in README.md and docs/ that a script renders from data, and a check that the
committed data still renders the committed text.

REPORTS below is the registry: the document, the block in it (the lines between `<!-- report: NAME -->`
and `<!-- /report: NAME -->`, or the whole file), the committed data under docs/results/ and the command
that renders the block from that data. A report whose data was not kept is listed by gap(): its block is
a note, rendered here, that says what is committed and what is not; --check prints it as a known gap, as
it does the sections of hand-written figures listed in UNBACKED.

    scripts/reports.py --check     # render each from its data, compare byte for byte; exit 1 on drift
    scripts/reports.py --write     # rewrite the blocks of the documents from their data
    scripts/reports.py --list      # the registry: document, block, data, command

Run by ctest `docs.reports`. Every docs/RESULTS*.md must be registered, and every report marker in
README.md and docs/ must name an entry, so a new report cannot miss the check.
"""
import argparse
import difflib
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = "scripts/bench_peers.py"


PISSA = ["docs/results/pissa/bench_pissa_qwen2.5-0.5b.json", "docs/results/pissa/bench_pissa_qwen2.5-7b_1layer.json"]


def phase(name, doc, data):
    """A phase report (paper_phase.py), the whole document."""
    return dict(name=name, doc=doc, whole=True, data=[data],
                command=["scripts/paper_phase.py", "--data", data, "--results", doc, "--print"])


def peers(name, data):
    """A bench_peers.py table in docs/PERFORMANCE.md, a text block."""
    return dict(name=name, doc="docs/PERFORMANCE.md", data=[data], command=[PEERS, "--table", data], fence=True)


NO_CPU = "The data does not name the CPU that ran it (the report says only how many cores)."


def gap(name, doc, committed, lost, command, machine=NO_CPU):
    """A generated report whose data was not kept: its block is a note saying so."""
    return dict(name=name, doc=doc, data=committed, lost=lost, command=command, machine=machine, gap=True)


def paper_gap(name, doc, plots, sweep, command, machine=NO_CPU):
    committed = sorted(glob.glob(os.path.join(ROOT, plots, "*")))
    return gap(name, doc, [os.path.relpath(p, ROOT) for p in committed],
               f"the per-step metrics of its runs (`{sweep}`)", f"`{command}`", machine)


def paper(name, doc, plots):
    """A paper report (paper_report.py), the whole document, from its sweep's report_data.json; it also
    embeds what it finds of its base's other sweeps (their summary.json) and phase diagrams (phase.json)."""
    data = f"{plots}/report_data.json"
    others = [f"docs/results/{n}/summary.json" for n in ("quick", "fp8", "quick-analog", "quick-analog-pool")
              if f"docs/results/{n}" != plots]
    return dict(name=name, doc=doc, whole=True,
                data=[data] + others + ["docs/results/phase/phase.json", "docs/results/phase-analog/phase.json"],
                command=["scripts/paper_report.py", "--data", data, "--results", doc, "--print"])


REPORTS = [
    # The phase diagrams: rendered from their committed phase.json.
    phase("phase", "docs/RESULTS-phase.md", "docs/results/phase/phase.json"),
    phase("phase-analog", "docs/RESULTS-phase-analog.md", "docs/results/phase-analog/phase.json"),
    # The README's table of the reproduce.sh presets: wall times and outcomes from their committed runs.
    dict(name="readme-presets", doc="README.md",
         data=[f"docs/results/{n}/{f}" for n in ("quick", "fp8", "quick-analog", "quick-analog-pool", "full")
               for f in ("report_data.json", "summary.json")]
         + ["docs/results/phase/phase.json", "docs/results/phase-analog/phase.json"],
         command=["scripts/paper_presets.py", "--table"]),
    # Every config key, its type, default and doc (docs/CONFIG.md's table): rendered by the binary from
    # the config structs' visit(), so the page cannot drift from the keys a run reads.
    dict(name="config-keys", doc="docs/CONFIG.md", data=["include/unstuck/config/run_config.h"],
         command=["unstuck", "config", "docs", "--markdown"]),
    # The math verifier against math-verify (docs/TASKS.md cites it).
    dict(name="math-differential", doc="docs/results/math-differential/report.md", whole=True,
         data=["docs/results/math-differential/report.json"],
         command=["tests/reward/math_differential.py", "--markdown", "docs/results/math-differential/report.json"]),
    # PiSSA's start-up against peft (docs/GRPO.md, "PiSSA").
    dict(name="pissa", doc="docs/GRPO.md", indent=2, data=PISSA, command=["scripts/bench_pissa.py", "--table"] + PISSA),
    # Unstuck against TRL and transformers at the countdown policy's size (docs/PERFORMANCE.md).
    peers("peers-quiet", "docs/results/bench_peers_quiet.json"),
    peers("peers-quiet-before", "docs/results/bench_peers_quiet_before.json"),
    peers("peers-gen-growcache", "docs/results/bench_peers_gen_growcache.json"),
    peers("peers-gen-dc91d6d", "docs/results/bench_peers_gen_dc91d6d.json"),
    peers("peers-gen-kernels", "docs/results/bench_peers_gen_kernels.json"),
    peers("peers-gen-bf16kernel", "docs/results/bench_peers_gen_bf16kernel.json"),
    peers("peers-step-kernels", "docs/results/bench_peers_step_kernels.json"),
    peers("peers-shared", "docs/results/bench_peers.json"),
    peers("peers-step-ref1", "docs/results/bench_peers_step_ref1.json"),
    peers("peers-step-ref0-t1", "docs/results/bench_peers_step_ref0_t1.json"),
    peers("peers-step-ref0-t2", "docs/results/bench_peers_step_ref0_t2.json"),
    # precision.compute: auto's probe per model shape (docs/PRECISION.md).
    dict(name="bench-compute", doc="docs/PRECISION.md", indent=2, data=["docs/results/bench-compute/probe.json"],
         command=["scripts/bench_compute.py", "--table", "docs/results/bench-compute/probe.json"]),
    # The memory plan per rank at real shapes and world sizes (docs/DISTRIBUTED.md, issue 49).
    dict(name="plan-per-rank", doc="docs/DISTRIBUTED.md", data=["docs/results/plan-per-rank/plan.json"],
         command=["scripts/plan_table.py", "--table", "docs/results/plan-per-rank/plan.json"]),
    # The reward path's throughput (docs/TASKS.md): bench reward's own benchmarks and whole reward score commands.
    dict(name="bench-reward-embedded", doc="docs/TASKS.md", data=["docs/results/bench-reward/reward.json"],
         command=["scripts/bench_reward.py", "--table", "docs/results/bench-reward/reward.json", "--part", "embedded"]),
    dict(name="bench-reward-commands", doc="docs/TASKS.md", data=["docs/results/bench-reward/reward.json"],
         command=["scripts/bench_reward.py", "--table", "docs/results/bench-reward/reward.json", "--part", "commands"]),
    # The LoRA sweeps' sticking per projection and factor (docs/GRPO.md), reduced from their runs' metrics.
    dict(name="lora-sticking", doc="docs/GRPO.md", indent=2, data=["docs/results/lora/sticking.json"],
         command=["scripts/lora_sticking.py", "--table", "docs/results/lora/sticking.json"]),
    dict(name="lora-sticking-pissa", doc="docs/GRPO.md", indent=2, data=["docs/results/lora-pissa/sticking.json"],
         command=["scripts/lora_sticking.py", "--table", "docs/results/lora-pissa/sticking.json"]),
    # The first GPU lease's figures (docs/BUILD.md), rendered from its committed logs and bench step JSON.
    dict(name="gpu-lease", doc="docs/BUILD.md",
         data=["docs/results/gpu/" + f for f in ("gpu_check.log", "bench_step_tiny.json", "paper_gpu_run.log",
                                                  "bench_step_27m.json")],
         command=["scripts/gpu_lease.py", "--table"]),
    # The first optimizer step at the 0.5B shape before and after huge pages (docs/PERFORMANCE.md).
    dict(name="first-step-before", doc="docs/PERFORMANCE.md", data=["docs/results/first-step/before_9671fda.json"],
         command=["scripts/bench_scale.py", "--table", "docs/results/first-step/before_9671fda.json"], fence=True),
    dict(name="first-step-after", doc="docs/PERFORMANCE.md", data=["docs/results/first-step/after_thp.json"],
         command=["scripts/bench_scale.py", "--table", "docs/results/first-step/after_thp.json"], fence=True),
    # The fused CPU sampler against libtorch's ops on one decode step's logits (docs/PERFORMANCE.md).
    dict(name="bench-sample", doc="docs/PERFORMANCE.md", data=["docs/results/bench-sample/sample.json"],
         command=["scripts/bench_sample.py", "--table", "docs/results/bench-sample/sample.json"], fence=True),
    # docs/SFT.md's generation benchmark quotes the latest committed generation run.
    dict(name="sft-peers-gen", doc="docs/SFT.md", data=["docs/results/bench_peers_gen_bf16kernel.json"],
         command=[PEERS, "--table", "docs/results/bench_peers_gen_bf16kernel.json"], fence=True),
    # The GPU's first measurements at real shapes: the rollout table from the two leases' scale.json.
    dict(name="gpu-scale-rollout", doc="docs/RESULTS-gpu-scale.md",
         data=["docs/results/gpu-scale/run1_scale.json", "docs/results/gpu-scale/run2_scale.json"],
         command=["scripts/gpu_scale.py", "--table", "docs/results/gpu-scale/run1_scale.json",
                  "docs/results/gpu-scale/run2_scale.json"]),
    # Paper sweeps whose runs were not kept: the plots and summary.json are committed, the metrics are not.
    # A rerun writes <plots>/report_data.json; its entry then becomes dict(name, doc, whole=True,
    # data=[<plots>/report_data.json], command=["scripts/paper_report.py", "--data", <that file>,
    # "--results", doc, "--print"]) (RESULTS-variants.md: scripts/variants.py --render <its --data>).
    # The quick sweep (the README's main job), rerun at 5d3ff9c with its data.
    paper("results-quick", "docs/RESULTS.md", "docs/results/quick"),
    # --full's first half (the small base), rerun at 44a1bd4 with its data.
    paper("results-full", "docs/RESULTS-full.md", "docs/results/full"),
    paper_gap("results-full-wide", "docs/RESULTS-full-wide.md", "docs/results/full-wide", "runs/paper-full-wide",
              "scripts/reproduce.sh --full"),
    # The FP8 sweep, rerun at d4a9304 with its data.
    paper("results-fp8", "docs/RESULTS-fp8.md", "docs/results/fp8"),
    # The analog sweeps, rerun at 498c5cc's binary with their data.
    paper("results-quick-analog", "docs/RESULTS-quick-analog.md", "docs/results/quick-analog"),
    # --quick-analog at k = 2 (its arm's own k before the calibration), rerun at a1332d4 with its data.
    paper("results-quick-analog-k2", "docs/RESULTS-quick-analog-k2.md", "docs/results/quick-analog-k2"),
    paper("results-quick-analog-pool", "docs/RESULTS-quick-analog-pool.md", "docs/results/quick-analog-pool"),
    paper_gap("results-gpu", "docs/RESULTS-gpu.md", "docs/results/gpu", "runs/paper-gpu",
              "scripts/reproduce.sh --gpu", "It ran on one NVIDIA H200 (paper_gpu_run.log names the device; "
              "the host CPU is not recorded)."),
    # The LoRA sweep, rerun at 9671fda with its data.
    paper("results-lora", "docs/RESULTS-lora.md", "docs/results/lora"),
    # PiSSA's LoRA sweep, rerun at 9671fda with its data.
    paper("results-lora-pissa", "docs/RESULTS-lora-pissa.md", "docs/results/lora-pissa"),
    # The rounding kernels and the fused AdamW (docs/PRECISION.md), from bench_precision.py's data.
    dict(name="bench-precision", doc="docs/PRECISION.md", data=["docs/results/bench-precision/avx512.json"],
         command=["scripts/bench_precision.py", "--table", "docs/results/bench-precision/avx512.json"]),
    dict(name="bench-precision-fp8", doc="docs/PRECISION.md", indent=2,
         data=["docs/results/bench-precision/fp8_avx512.json", "docs/results/bench-precision/fp8_scalar.json"],
         command=["scripts/bench_precision.py", "--table", "docs/results/bench-precision/fp8_avx512.json",
                  "docs/results/bench-precision/fp8_scalar.json"]),
    # The policy-gradient variants, rerun at 52e1f2a with their data.
    dict(name="variants", doc="docs/RESULTS-variants.md", whole=True, data=["docs/results/variants/variants.json"],
         command=["scripts/variants.py", "--render", "docs/results/variants/variants.json"]),
]

# Hand-written figures with no committed data behind them, not yet withdrawn or backed (issue 47, item 3):
# --check prints them as known gaps so they cannot pass for checked. (document, section, what)
UNBACKED = [
]


def marker(name, end=False):
    return f"<!-- {'/' if end else ''}report: {name} -->"


def rel_link(doc, path):
    return os.path.relpath(os.path.join(ROOT, path), os.path.dirname(os.path.join(ROOT, doc)))


def gap_note(e):
    """The block of a report whose data was not kept."""
    if e["data"]:
        folders = sorted({os.path.dirname(p) for p in e["data"]})
        kinds = sorted({"the plots" if p.endswith(".png") else f"`{os.path.basename(p)}`" for p in e["data"]})
        kept = (f"Committed with it: {', '.join(kinds)} in " +
                ", ".join(f"[{rel_link(e['doc'], f)}/]({rel_link(e['doc'], f)}/)" for f in folders) + ".")
    else:
        kept = "Nothing of its data is committed."
    return (f"**Data not kept.** {kept} Not kept: {e['lost']}, so the numbers below cannot be rendered "
            f"again or checked; `scripts/reports.py --check` lists this report as a known gap. {e['machine']} "
            f"Rerunning {e['command']} writes its data under docs/results/, from which `scripts/reports.py` can "
            "check the report byte for byte.\n")


def render(e):
    """(text, error) of an entry's block as its command renders it from the committed data."""
    if e.get("gap"):
        text = gap_note(e)
    else:
        cmd = list(e["command"])
        if cmd[0].endswith(".py"):
            cmd = [sys.executable] + cmd
        elif cmd[0] == "unstuck":  # the binary of this checkout (ctest gives its path)
            cmd[0] = os.environ.get("UNSTUCK_BINARY") or os.path.join(ROOT, "build", "unstuck")
            if not os.path.exists(cmd[0]):
                return None, f"{cmd[0]} not found: build it, or give its path in UNSTUCK_BINARY"
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return None, f"`{' '.join(e['command'])}` exited {r.returncode}: {r.stderr.strip()[-800:]}"
        text = r.stdout
        if e.get("fence"):
            text = "```\n" + text + "```\n"
    if not e.get("whole"):
        pad = " " * e.get("indent", 0)
        text = "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))
    return text, None


def locate(lines, e):
    """(start, end) line indices of the block between its markers (exclusive), or None."""
    begin, end = marker(e["name"]), marker(e["name"], end=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        return None
    return starts[0] + 1, ends[0]


def insert_gap_markers(lines, e):
    """Where a gap note goes when its markers are missing: after the generated-by comment, else the title."""
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("<!-- Generated by")), 1)
    return lines[:at] + ["\n", marker(e["name"]) + "\n", marker(e["name"], end=True) + "\n"] + lines[at:]


def current(e):
    """(lines of the document, (start, end) of the block) or an error string."""
    path = os.path.join(ROOT, e["doc"])
    if not os.path.exists(path):
        return None, None, f"{e['doc']} is missing"
    lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
    if e.get("whole"):
        return lines, (0, len(lines)), None
    span = locate(lines, e)
    if span is None:
        hint = (" (if its script rewrote the report from new data, replace the gap entry with the command that "
                "renders it from that data)" if e.get("gap") else "")
        return lines, None, (f"{e['doc']}: no single block between `{marker(e['name'])}` and "
                             f"`{marker(e['name'], end=True)}`{hint}")
    return lines, span, None


def check_registry():
    """Problems with the registry itself: missing data, unregistered RESULTS files and markers."""
    problems = []
    names = [e["name"] for e in REPORTS]
    problems += [f"registry: {n} is listed twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for e in REPORTS:
        problems += [f"{e['name']}: data file {p} is missing" for p in e["data"]
                     if not os.path.exists(os.path.join(ROOT, p))]
    registered = {e["doc"] for e in REPORTS}
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "RESULTS*.md"))):
        doc = os.path.relpath(path, ROOT)
        if doc not in registered:
            problems.append(f"{doc}: a RESULTS file not in scripts/reports.py's registry")
    docs = [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    for path in sorted(docs):
        for n in re.findall(r"<!-- /?report: ([^ ]+) -->", open(path, encoding="utf-8").read()):
            if n not in names:
                problems.append(f"{os.path.relpath(path, ROOT)}: marker `report: {n}` names no registry entry")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", action="store_true", help="render each report from its data and compare")
    what.add_argument("--write", action="store_true", help="rewrite each report's block from its data")
    what.add_argument("--list", action="store_true", help="print the registry")
    ap.add_argument("--only", help="comma-separated entry names (default: all)")
    a = ap.parse_args()
    entries = [e for e in REPORTS if not a.only or e["name"] in a.only.split(",")]
    if a.list:
        for e in entries:
            where = e["doc"] if e.get("whole") else f"{e['doc']} ({marker(e['name'])})"
            print(f"{e['name']}: {where}\n  data: {', '.join(e['data']) or 'none'}\n  "
                  + (f"data not committed: {e['lost']}" if e.get("gap") else f"command: {' '.join(e['command'])}"))
        return 0
    problems = check_registry() if not a.only else []
    for problem in problems:
        print(f"ERROR {problem}")
    counts = {"ok": 0, "gap": 0, "failed": len(problems)}
    for e in entries:
        lines, span, error = current(e)
        if error and a.write and e.get("gap") and lines is not None:
            lines = insert_gap_markers(lines, e)
            span, error = locate(lines, e), None
        text, render_error = render(e)
        error = error or render_error
        if error:
            print(f"ERROR {e['name']}: {error}")
            counts["failed"] += 1
            continue
        old = "".join(lines[span[0]:span[1]])
        label = e["doc"] + ("" if e.get("whole") else f" [{e['name']}]")
        if old != text and a.write:
            with open(os.path.join(ROOT, e["doc"]), "w", encoding="utf-8") as f:
                f.write("".join(lines[:span[0]]) + text + "".join(lines[span[1]:]))
            print(f"wrote {label}")
            counts["gap" if e.get("gap") else "ok"] += 1
            continue
        if old != text:
            counts["failed"] += 1
            print(f"DRIFT {label}: the committed text differs from what its data renders "
                  f"(`scripts/reports.py --write --only {e['name']}` rewrites it):")
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(keepends=True), text.splitlines(keepends=True),
                                                       f"{e['doc']} (committed)", f"{e['doc']} (from its data)"))
            continue
        if e.get("gap"):
            counts["gap"] += 1
            print(f"gap   {label}: data not committed: {e['lost']}")
        else:
            counts["ok"] += 1
            print(f"ok    {label} <- {' '.join(e['command'])}")
    if not a.only:
        for doc, section, what in UNBACKED:
            print(f"gap   {doc} (\"{section}\"): hand-written figures without committed data: {what}")
    print(f"reports.py: {counts['ok']} of {len(entries)} reports rendered byte for byte from committed data; "
          f"{counts['gap']} known gaps (data not committed); {counts['failed']} failed"
          + ("" if a.only else f"; {len(UNBACKED)} sections of hand-written figures without data (listed above)"))
    return 1 if counts["failed"] else 0

if __name__ == "__main__":
    sys.exit(main())
