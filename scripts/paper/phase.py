"""The phase diagram of issue 16 (item 5): BF16-RN's and BF16-SR's lag behind FP16 over the learning
rate, or over the rounding grid at one LR (the grid-scaled analog, precision.analog_mantissa_bits: BF16
with fewer mantissa bits), from sweeps of scripts/compare.py (the `paper-phase` / `paper-phase-analog`
presets, plus any other sweep on the same base, prompts and steps, e.g. the quick sweep at x).

Runs are grouped by (precision mode, LR, grid); in each row the lags are paired per seed against FP16
at that LR, grid and seed: the relative area lag (FP16's mean training reward minus the arm's, over FP16's
area above its start; 0 = no lag, 1 = no progress) and the ratio of steps to 50% of FP16's gain.
Writes <plots>/phase.json, <plots>/phase_diagram.png and a markdown report; the report of a sweep
(paper/report.py) embeds phase.json's section (markdown below) when it sits in docs/results/phase/.

    .venv/bin/python scripts/paper_phase.py --sweeps runs/paper-phase runs/paper-quick \
        --results docs/RESULTS-phase.md --plots docs/results/phase
    .venv/bin/python scripts/paper_phase.py --data docs/results/phase/phase.json \
        --results docs/RESULTS-phase.md          # the same report from the committed phase.json
"""
import argparse
import json
import os
import sys

import numpy as np

from .measures import GainLevels, area_lag, fmt
from .runs import ReportError, Run, base_sha256
from .verdicts import MIN_FP16_GAIN

MODES = ("fp16", "bf16", "bf16_sr")
LABELS = {"fp16": "FP16", "bf16": "BF16-RN", "bf16_sr": "BF16-SR"}
MATCH_KEYS = ("steps", "base", "base_sha256", "compute", "pool", "overrides")  # sweeps merged must agree on these


def load_runs(sweeps):
    """{(mode, lr, bits): {seed: Run}} over the sweeps (the first sweep wins a duplicate),
    and notes on what was merged or skipped."""
    first, groups, notes = None, {}, []
    for folder in sweeps:
        path = os.path.join(folder, "sweep.json")
        if not os.path.exists(path):
            raise ReportError(f"{path} is missing: not a sweep folder of scripts/compare.py")
        sw = json.load(open(path))
        sw["base_sha256"] = base_sha256(sw)
        if first is None:
            first = sw
        else:
            diff = [k for k in MATCH_KEYS if sw.get(k) != first.get(k)]
            if sw["base_sha256"] is None:  # two unidentified bases are not the same base
                diff.append("base_sha256 (its base policy's model file is not there to identify it)")
            if diff:
                notes.append(f"`{folder}` left out: it differs from `{sweeps[0]}` in {', '.join(diff)}")
                continue
        steps, used, unfinished = int(sw["steps"]), 0, 0
        for arm in sw["arms"].split():
            for s in range(1, int(sw["seeds"]) + 1):
                d = os.path.join(folder, arm, f"seed{s}")
                if not os.path.exists(os.path.join(d, "metrics.jsonl")):
                    continue
                try:
                    r = Run(arm, s, d, steps)
                except ReportError:
                    if folder == sweeps[0]:
                        raise
                    unfinished += 1  # a sweep still running: its finished runs count
                    continue
                if r.mode in MODES and s not in groups.setdefault((r.mode, r.lr, r.bits), {}):
                    groups[(r.mode, r.lr, r.bits)][s] = r
                    used += 1
        notes.append(f"`{folder}` ({sw['preset']}, `{sw['command']}`, commit {sw.get('commit', 'unknown')}): "
                     f"{used} runs used" + (f", {unfinished} unfinished left out" if unfinished else ""))
    return first, groups, notes


def analyse(groups, steps, min_gain):
    w = max(3, steps // 10)
    rows = []
    # rows by LR, then from the real formats (bits 0, i.e. BF16's 7) to the coarsest analog grid
    for lr, bits in sorted({(lr, b) for _, lr, b in groups}, key=lambda k: (k[0], -(k[1] or 7))):
        ref = groups.get(("fp16", lr, bits))
        if not ref:
            continue
        levels = GainLevels(list(ref.values()), w)
        row = {"lr": lr, "bits": bits, "seeds": sorted(ref), "fp16_gain": [levels.gain[s] for s in sorted(ref)],
               "gain_sufficient": levels.sufficient(min_gain), "arms": {}}
        for mode in MODES:
            runs = groups.get((mode, lr, bits), {})
            paired_seeds = sorted(s for s in runs if s in ref)
            if not paired_seeds:
                continue
            lags, ratio, ratio_bound = [], [], []
            for s in paired_seeds:
                a, f = runs[s], ref[s]
                lags.append(area_lag(levels, f, a))
                sf, sa = levels.steps_to(f, 0.5), levels.steps_to(a, 0.5)
                ratio.append(None if sf is None else (sa if sa is not None else steps + 1) / sf)
                ratio_bound.append(sa is None)
            row["arms"][mode] = {
                "seeds": paired_seeds, "area_lag": lags, "steps50_ratio": ratio,
                "steps50_ratio_is_lower_bound": ratio_bound,
                "sticking": [float(runs[s].sticking.mean()) for s in paired_seeds],
                "changed_end": [float(runs[s].changed[-1]) for s in paired_seeds],
                "mean_reward": [float(runs[s].reward.mean()) for s in paired_seeds]}
        rows.append(row)
    return rows


def mean_or_none(values):
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def coarseness(row):
    """How many times BF16's ulp the row's grid is: 1 for the real formats (bits 0, or absent in rows
    written before the analog), 2^(7 - bits) for the analog."""
    return 2 ** (7 - (row.get("bits") or 7))


def grid_label(row):
    return "BF16 (7 bits)" if coarseness(row) == 1 else f"{row['bits']} bits ({coarseness(row)}x coarser; analog)"


def x_axis(rows):
    """The diagram's axis: the LR, or the grid when the rows share one LR (the analog sweep)."""
    if len({coarseness(row) for row in rows}) == 1:
        return "lr"
    if len({row["lr"] for row in rows}) == 1:
        return "grid"
    raise ReportError("the rows vary both the LR and the grid: give the phase diagram one axis "
                      "(a sweep over LRs, or one over grids at one LR)")


def plot(rows, folder, min_gain):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    axis = x_axis(rows)
    xof = (lambda row: coarseness(row)) if axis == "grid" else (lambda row: row["lr"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colors = {"fp16": "tab:blue", "bf16": "tab:red", "bf16_sr": "tab:green"}
    for mode in ("bf16", "bf16_sr"):
        for ax, key in ((axes[0], "area_lag"), (axes[1], "steps50_ratio")):
            xs, ys, hollow = [], [], []
            for row in rows:
                m = row["arms"].get(mode)
                if not m:
                    continue
                for v in m[key]:
                    if v is not None:
                        ax.scatter([xof(row)], [100 * v if key == "area_lag" else v], s=12, alpha=0.4,
                                   color=colors[mode])
                mv = mean_or_none(m[key])
                if mv is not None:
                    xs.append(xof(row))
                    ys.append(100 * mv if key == "area_lag" else mv)
                    hollow.append(not row["gain_sufficient"])
            ax.plot(xs, ys, "-", color=colors[mode], label=f"{LABELS[mode]} vs FP16 (mean over seeds)")
            for x, y, h in zip(xs, ys, hollow):
                ax.scatter([x], [y], s=50, color="white" if h else colors[mode], edgecolors=colors[mode], zorder=3)
    for mode in MODES:
        xs = [xof(row) for row in rows if mode in row["arms"]]
        ys = [np.mean(row["arms"][mode]["sticking"]) for row in rows if mode in row["arms"]]
        axes[2].plot(xs, ys, "o-", color=colors[mode], label=LABELS[mode])
    axes[0].axhline(0, color="gray", lw=0.8)
    axes[1].axhline(1, color="gray", lw=0.8)
    axes[1].axhline(1.3, color="tab:red", lw=0.8, ls=":", label="T1 target (1.3x)")
    same = "the same grid" if axis == "grid" else "the same LR"
    titles = (f"area lag vs FP16 at {same}\n(% of FP16's area above its start)",
              "steps to 50% of FP16's gain / FP16's\n(never reached: steps + 1, a lower bound)",
              "mean per-step sticking of the compute weights")
    xs = [xof(row) for row in rows]
    ticks = [(f"{x}x" if axis == "grid" else f"{x:g}") for x in xs]
    for ax, title in zip(axes, titles):
        ax.set_xscale("log", base=2 if axis == "grid" else 10)
        ax.set_xticks(xs, ticks)
        ax.minorticks_off()
        ax.set_xlabel(f"grid: ulp / BF16's ulp (LR {rows[0]['lr']:g})"
                      if axis == "grid" else "learning rate")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    over = ("the rounding grid (1x: real BF16; coarser: the grid-scaled analog, not a real format)"
            if axis == "grid" else "the LR")
    fig.suptitle(f"Phase diagram: lag behind FP16 over {over} (hollow: FP16's gain below {min_gain} in some seed, "
                 "lag not meaningful)", fontsize=10)
    fig.tight_layout()
    os.makedirs(folder, exist_ok=True)
    fig.savefig(os.path.join(folder, "phase_diagram.png"), dpi=110)
    plt.close(fig)
    return "phase_diagram.png"


def markdown(phase, rel_plots, heading="##"):
    """Markdown lines of the phase section; `rel_plots`: the plot folder relative to the document."""
    grid = x_axis(phase["rows"]) == "grid"
    if grid:
        lines = [f"{heading} Phase diagram over the rounding grid: the grid-scaled analog (issue 16, item 5)", ""]
        lines.append("**Not a real format.** The analog rounds the FP32 master to BF16 with fewer mantissa bits "
                     "(`precision.analog_mantissa_bits`, docs/PRECISION.md): a grid 2^(7 - bits) times coarser than "
                     "BF16's at every magnitude, so the same drift is that many times fewer half-ulps, as in a larger "
                     "model whose updates are smaller against its weights. Rounding to nearest or stochastic, the same "
                     "contract as BF16's; every arm of a row, FP16 included, starts from the base rounded onto that "
                     "row's grid; the 7-bit row is real BF16.")
        lines.append("")
    else:
        lines = [f"{heading} Phase diagram: the lag over the learning rate (issue 16, item 5)", ""]
    lines.append(f"Sources: {'; '.join(phase['notes'])}. {phase['steps']} GRPO steps per run, every arm at the "
                 "LR and grid of its row (FP16 in the same row is its reference), paired per seed. *Area lag*: "
                 "FP16's mean training reward over the run minus the arm's, divided by FP16's area above its start "
                 "(0: no lag; 1: no progress; negative: ahead). *Steps ratio*: the arm's steps to 50% of FP16's "
                 "gain over FP16's (`>` when the arm never reached it: steps + 1, a lower bound). *Sticking*: "
                 f"mean per-step fraction of compute weights left bit-identical. Lags at an LR where FP16's gain is "
                 f"below {phase['min_gain']} in some seed are marked *(gain too small)*: they divide by noise."
                 + (f" Wall time: {phase['timing']}." if phase.get("timing") else ""))
    lines.append("")
    lines.append(("| grid " if grid else "") + "| LR | seeds | FP16 gain per seed | BF16-RN area lag | BF16-SR area lag | BF16-RN steps ratio | "
                 "BF16-SR steps ratio | sticking FP16 / BF16-RN / BF16-SR | changed at end BF16-RN / BF16-SR |")
    lines.append(("|---" if grid else "") + "|---|---|---|---|---|---|---|---|---|")

    def per_seed(m, key, pct=False):
        if not m:
            return "n/a"
        out = []
        for v, bound in zip(m[key], m.get("steps50_ratio_is_lower_bound", [False] * len(m[key]))):
            if v is None:
                out.append("n/a")
            elif pct:
                out.append(f"{100 * v:+.0f}%")
            else:
                out.append((">" if bound and key == "steps50_ratio" else "") + f"{v:.2f}")
        mv = mean_or_none(m[key])
        mean_txt = "n/a" if mv is None else (f"{100 * mv:+.0f}%" if pct else f"{mv:.2f}")
        return f"**{mean_txt}** ({', '.join(out)})" if len(out) > 1 else mean_txt

    for row in phase["rows"]:
        a = row["arms"]
        stick = " / ".join(fmt(float(np.mean(a[m]["sticking"])), 3) if m in a else "n/a" for m in MODES)
        changed = " / ".join(fmt(float(np.mean(a[m]["changed_end"])), 3) if m in a else "n/a"
                             for m in ("bf16", "bf16_sr"))
        note = "" if row["gain_sufficient"] else " *(gain too small)*"
        lines.append((f"| {grid_label(row)} " if grid else "") + f"| {row['lr']:g}{note} | {len(row['seeds'])} | "
                     f"{', '.join(f'{g:+.3f}' for g in row['fp16_gain'])} | {per_seed(a.get('bf16'), 'area_lag', True)} | "
                     f"{per_seed(a.get('bf16_sr'), 'area_lag', True)} | {per_seed(a.get('bf16'), 'steps50_ratio')} | "
                     f"{per_seed(a.get('bf16_sr'), 'steps50_ratio')} | {stick} | {changed} |")
    lines += ["", f"![phase_diagram.png]({rel_plots}/phase_diagram.png)", ""]
    return lines


def document(phase, results, plots):
    """The phase report (RESULTS-phase*.md) of a phase.json, with links relative to `results`."""
    rel = os.path.relpath(plots, os.path.dirname(os.path.abspath(results)) or ".")
    over = "the rounding grid (grid-scaled analog)" if x_axis(phase["rows"]) == "grid" else "the LR"
    lines = [f"# Phase diagram: BF16 round-to-nearest and stochastic rounding vs FP16 over {over}", "",
             "<!-- Generated by scripts/paper_phase.py from the sweeps' metrics; do not edit by hand. -->", ""]
    lines += markdown(phase, rel)[2:]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--sweeps", nargs="+", help="sweep folders (the first one's settings rule)")
    src.add_argument("--data", help="a phase.json written earlier: render its report again (the plot is not "
                     "redrawn; --plots is the file's folder)")
    ap.add_argument("--results", required=True, help="markdown file to write")
    ap.add_argument("--plots", help="folder for phase_diagram.png and phase.json")
    ap.add_argument("--print", action="store_true", help="with --data: print the report and write nothing")
    ap.add_argument("--timing", default="", help="wall time of the sweep, as a phrase for the report")
    ap.add_argument("--min-gain", type=float, default=MIN_FP16_GAIN, help="FP16 gain below which a row's lags "
                    "are marked as not meaningful")
    a = ap.parse_args()
    if a.data:
        if a.plots:
            ap.error("--data: the plots are the data file's folder; drop --plots")
        try:
            text = document(json.load(open(a.data)), a.results, os.path.dirname(a.data) or ".")
        except (OSError, ValueError, KeyError) as e:
            print(f"paper_phase.py: error: {a.data}: {e}", file=sys.stderr)
            sys.exit(2)
        if a.print:
            sys.stdout.write(text)
        else:
            with open(a.results, "w") as f:
                f.write(text)
            print(f"paper_phase.py: wrote {a.results}")
        return
    if not a.plots or a.print:
        ap.error("--sweeps needs --plots, and --print needs --data")
    try:
        first, groups, notes = load_runs(a.sweeps)
        steps = int(first["steps"])
        rows = analyse(groups, steps, a.min_gain)
        if not rows:
            raise ReportError("no LR has FP16 runs: nothing to measure the lags against")
        x_axis(rows)  # one axis: the LR, or the grid at one LR
    except (ReportError, KeyError, OSError) as e:
        print(f"paper_phase.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    plot(rows, a.plots, a.min_gain)
    phase = {"rows": rows, "notes": notes, "steps": steps, "base": first.get("base"),
             "base_sha256": base_sha256(first), "min_gain": a.min_gain, "timing": a.timing,
             "plot": "phase_diagram.png"}
    with open(os.path.join(a.plots, "phase.json"), "w") as f:
        json.dump(phase, f, indent=1)
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    with open(a.results, "w") as f:
        f.write(document(phase, a.results, a.plots))
    for row in rows:
        print(f"paper_phase.py: LR {row['lr']:g}, grid {grid_label(row)}: FP16 gain {np.mean(row['fp16_gain']):+.3f}; " + "; ".join(
            f"{LABELS[m]} area lag {fmt(mean_or_none(v['area_lag']), 3)}, steps ratio "
            f"{fmt(mean_or_none(v['steps50_ratio']), 2)}, sticking {np.mean(v['sticking']):.3f}"
            for m, v in row["arms"].items() if m != "fp16"))
    print(f"paper_phase.py: wrote {a.results} and {a.plots}/phase_diagram.png")

