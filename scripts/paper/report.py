"""Plots, tables and verdicts of a sweep of scripts/compare.py (or scripts/reproduce.sh) -> RESULTS.md + PNGs.

Reads <sweep>/sweep.json, <sweep>/base_eval.json, <sweep>/drift.json (scripts/paper_drift.py, if
there) and <sweep>/<arm>/seed<k>/metrics.jsonl. Every number in the output is computed here from
those files; the definitions and rules (paper/measures.py, paper/verdicts.py) are written into the
report next to the numbers. Sweeps of the paper presets get the verdicts and size targets; comparisons
on a user's config (sweep.json "verdicts": false) get the same tables without them. The phase
diagram's section (paper/phase.py) is embedded when its phase.json sits next to the plot folder.

    .venv/bin/python scripts/paper_report.py --sweep runs/paper-quick --results docs/RESULTS.md \
        --plots docs/results/quick
    .venv/bin/python scripts/paper_report.py --data docs/results/quick/report_data.json \
        --results docs/RESULTS.md          # the same report from the committed data (report_data.json)

report_data.json, written next to the plots, holds what the report renders: sweep.json, base_eval.json,
drift.json and every run's per-step series (paper/runs.py, Run.to_data).
"""
import argparse
import json
import os
import re
import sys

import numpy as np

from .arms import FP8_MODES, PAPER_LABELS, grid_name
from .measures import (LEVELS, GainLevels, area_lag, calibrated_k, describe_diffs, fmt, format_ms, paired,
                       size_measures, smooth)
from .phase import markdown as phase_markdown
from .runs import ReportError, Run, base_sha256
from .verdicts import (MIN_FP16_GAIN, REL_TOLERANCE, T_CLEAR, claim_verdicts, regime_targets, size_targets,
                       sr_noise, sr_vs_higher_lr)

ARM_COLORS = {"fp32": "black", "fp16": "tab:blue", "bf16": "tab:red", "bf16_lr_k": "tab:orange",
              "bf16_sr": "tab:green", "fp16_sr": "tab:purple"}
OTHER_COLORS = ["tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray"]


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA_FILE = "report_data.json"  # written next to the plots: what the report renders, per run and step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--sweep", help="sweep folder written by scripts/compare.py")
    src.add_argument("--data", help=f"a {DATA_FILE} that an earlier report wrote next to its plots: render the "
                     "report again from it (no sweep folder; the plots are not redrawn; --timing and --min-gain "
                     "are the data's)")
    ap.add_argument("--results", required=True, help="markdown file to write (e.g. docs/RESULTS.md)")
    ap.add_argument("--plots", help="folder for the PNG plots and the data (with --data: the data file's folder)")
    ap.add_argument("--print", action="store_true", help="with --data: print the report on stdout and write "
                    "nothing (scripts/reports.py --check compares it with the committed report)")
    ap.add_argument("--timing", default="", help="wall time of the sweep, as a phrase for the report")
    ap.add_argument("--min-gain", type=float, default=MIN_FP16_GAIN,
                    help="minimum absolute FP16 gain in training reward, every seed, before any claim can read "
                    f"reproduced or any size target be met (default {MIN_FP16_GAIN})")
    a = ap.parse_args()
    if a.sweep and (not a.plots or a.print):
        ap.error("--sweep needs --plots, and --print needs --data")
    if a.data and a.plots:
        ap.error("--data: the plots are the data file's folder; drop --plots")
    try:
        report(a)
    except ReportError as e:
        print(f"paper_report.py: error: {e}", file=sys.stderr)
        sys.exit(2)


def read_sweep(a):
    """What the report renders, from a sweep folder: sweep.json, base_eval.json, drift.json and every
    run's per-step series (Run.to_data), as one JSON-able dict (written as <plots>/report_data.json)."""
    sweep_path = os.path.join(a.sweep, "sweep.json")
    if not os.path.exists(sweep_path):
        raise ReportError(f"{sweep_path} is missing: not a sweep folder of scripts/compare.py")
    sweep = json.load(open(sweep_path))
    sweep["base_sha256"] = base_sha256(sweep)  # an older record: the base as it is now, at its report
    steps, n_seeds, arms = int(sweep["steps"]), int(sweep["seeds"]), sweep["arms"].split()
    base_path = os.path.join(a.sweep, "base_eval.json")
    drift_path = os.path.join(a.sweep, "drift.json")
    return {"sweep": sweep, "sweep_folder": a.sweep, "timing": a.timing, "min_gain": a.min_gain,
            "base_eval": json.load(open(base_path)) if os.path.exists(base_path) else None,
            "drift": json.load(open(drift_path)) if os.path.exists(drift_path) else None,
            "runs": {arm: [Run(arm, s, os.path.join(a.sweep, arm, f"seed{s}"), steps).to_data()
                           for s in range(1, n_seeds + 1)] for arm in arms}}


def same_base(other, sweep):
    """Whether another report's data (a phase.json, a summary.json) comes from this sweep's base policy:
    the same model file, not the same folder name (see runs.base_sha256)."""
    return other.get("base_sha256") is not None and other.get("base_sha256") == sweep.get("base_sha256")


def read_data(path):
    try:
        data = json.load(open(path))
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: {e}")
    missing = [k for k in ("sweep", "sweep_folder", "timing", "min_gain", "base_eval", "drift", "plots", "runs")
               if k not in data]
    if missing:
        raise ReportError(f"{path}: not a {DATA_FILE} of paper_report.py (no {', '.join(missing)})")
    return data


def report(a):
    if a.data:
        data = read_data(a.data)
        a.plots = os.path.dirname(a.data) or "."
    else:
        data = read_sweep(a)
    # Rendered from the data in both cases, so the committed data renders the committed report exactly.
    a.sweep, a.timing, a.min_gain = data["sweep_folder"], data["timing"], data["min_gain"]
    sweep, drift = data["sweep"], data["drift"]
    runs = {arm: [Run.from_data(d) for d in ds] for arm, ds in data["runs"].items()}
    steps = len(next(iter(runs.values()))[0].step)
    labels = dict(PAPER_LABELS, **sweep.get("labels", {}))
    ref = sweep.get("reference", "fp16")
    if ref not in runs:
        ref = next(iter(runs))
    w = max(3, steps // 10)  # smoothing window and "final" window, in steps
    levels = GainLevels(runs[ref], w)

    rows = {}
    for arm, rs in runs.items():
        rows[arm] = {
            "lr": rs[0].lr,
            "mode": rs[0].mode,
            "final_eval": [r.eval_acc[-1] for r in rs],
            "reward_auc": [r.reward.mean() for r in rs],
            "steps_to_target": [levels.steps_to(r, 0.5) for r in rs],
            "kl_end": [r.kl[-w:].mean() for r in rs],
            "kl_at_matched": [levels.kl_at(r, 0.5) for r in rs],
            "sticking": [r.sticking.mean() for r in rs],
            "changed_end": [r.changed[-1] for r in rs],
            "seconds": [r.seconds for r in rs],
        }

    if not a.data:
        os.makedirs(a.plots, exist_ok=True)
        plots = make_plots(runs, w, a.plots, ref, labels)
        if drift:
            plots += [p for p in drift.get("plots", []) if os.path.exists(os.path.join(a.plots, p))]
        data["plots"] = plots
        path = os.path.join(a.plots, DATA_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(path + ".tmp", path)
    text = write_markdown(a, sweep, runs, rows, ref, labels, w, levels, data["base_eval"], data["plots"], drift,
                          write_summary=not a.print)
    if a.print:
        sys.stdout.write(text)
        return
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    tmp = a.results + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, a.results)
    print(f"paper_report.py: wrote {a.results}" + ("" if a.data else f", {len(data['plots'])} plots and {DATA_FILE}")
          + f" in {a.plots}")


def make_plots(runs, w, folder, ref, labels):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = iter(OTHER_COLORS * 4)
    colors = {arm: ARM_COLORS.get(arm) or next(others) for arm in runs}

    def band(ax, x, curves, arm):
        c = np.array(curves)
        m = c.mean(axis=0)
        lo, hi = (c.min(axis=0), c.max(axis=0)) if len(c) > 1 else (m, m)
        ax.plot(x, m, color=colors[arm], label=labels.get(arm, arm), lw=1.6)
        ax.fill_between(x, lo, hi, color=colors[arm], alpha=0.15, lw=0)

    def finish(fig, ax, name, xlabel, ylabel, title):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, name), dpi=110)
        plt.close(fig)

    n = len(next(iter(runs.values())))
    band_note = f"mean over {n} seeds, band = min..max" if n > 1 else "1 seed"
    smoothed = f", {w}-step moving average"
    specs = [  # file, y label, title, curve per run (None: the evaluations)
        ("reward_vs_step.png", "training reward", "training reward" + smoothed, lambda r: smooth(r.reward, w)),
        ("eval_vs_step.png", "greedy eval accuracy", "greedy eval accuracy on the test records", None),
        ("kl_vs_step.png", "KL(policy || reference) per token", "KL to the reference" + smoothed,
         lambda r: smooth(r.kl, w)),
        ("sticking_vs_step.png", "sticking fraction", "compute weights left unchanged by each step",
         lambda r: r.sticking),
        ("changed_vs_step.png", "changed since the start", "compute weights that differ from the start",
         lambda r: r.changed),
    ]
    written = []
    for name, ylabel, title, fn in specs:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for arm, rs in runs.items():
            if fn is None:
                band(ax, rs[0].eval_step, [r.eval_acc for r in rs], arm)
            else:
                band(ax, rs[0].step, [fn(r) for r in rs], arm)
        finish(fig, ax, name, "GRPO step", ylabel, f"{title} ({band_note})")
        written.append(name)
    # The trade-off: KL against reward along the (seed-mean, smoothed) trajectories.
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm, rs in runs.items():
        x = np.mean([smooth(r.reward, w) for r in rs], axis=0)
        y = np.mean([smooth(r.kl, w) for r in rs], axis=0)
        ax.plot(x, y, color=colors[arm], label=labels.get(arm, arm), lw=1.6)
        ax.scatter(x[-1:], y[-1:], color=colors[arm], s=20)
    finish(fig, ax, "kl_vs_reward.png", f"training reward ({w}-step moving average)",
           "KL(policy || reference) per token",
           f"KL vs reward along training ({band_note.split(',')[0]}; dot = last step)")
    written.insert(3, "kl_vs_reward.png")
    # The paired view: each arm's running mean of (its reward - FP16's reward) per step, same seed.
    if ref in runs:
        ref_by_seed = {r.seed: r for r in runs[ref]}
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for arm, rs in runs.items():
            if arm == ref:
                continue
            curves = [np.cumsum(r.reward - ref_by_seed[r.seed].reward) / r.step for r in rs if r.seed in ref_by_seed]
            band(ax, rs[0].step, curves, arm)
        ax.axhline(0, color=colors[ref], lw=1, ls="--", label=labels.get(ref, ref))
        finish(fig, ax, "paired_reward_vs_fp16.png", "GRPO step", f"running mean of reward minus {labels.get(ref, ref)}'s (same seed)",
               f"paired difference to {labels.get(ref, ref)} ({band_note})")
        written.insert(1, "paired_reward_vs_fp16.png")
    return written


def write_markdown(a, sweep, runs, rows, ref, labels, w, levels, base_eval, plots, drift, write_summary=True):
    """The report's markdown text; writes the sweep's summary.json next to the plots when write_summary."""
    n_seeds = len(next(iter(runs.values())))
    steps = len(next(iter(runs.values()))[0].step)
    paper = sweep.get("verdicts", True)
    ref_label = labels.get(ref, ref)
    lines = []
    add = lines.append
    add("# Results: FP16 vs BF16 vs BF16 with stochastic rounding in GRPO" if paper else
        "# Comparison of precision modes (paired seeds)")
    add("")
    add("<!-- Generated by scripts/paper_report.py from the sweep's metrics; do not edit by hand. -->")
    add("")
    if base_eval:
        dtype = base_eval.get("dtype", "bf16").upper()
        base_txt = (f" (greedy eval accuracy of the base with {dtype} compute: {base_eval['greedy_accuracy']:.3f} "
                    f"on {sweep['eval_samples']} test records)")
    else:
        base_txt = ""
    arms_txt = ("The arms' configs are `configs/paper/<arm>.yaml`; they differ only in `precision.mode` and "
                "`optim.lr`." if paper else
                "Every arm is the given config with `precision.mode` and `optim.lr` overridden.")
    add(f"Produced by `{sweep['command']}` at commit {sweep.get('commit', 'unknown')} (sweep folder `{a.sweep}`, "
        f"preset `{sweep['preset']}`, compute: {sweep.get('compute', 'as configured')}): "
        f"{len(runs)} arms x {n_seeds} paired seeds x {steps} GRPO steps from the base policy "
        f"`{sweep['base']}`{base_txt}. {arms_txt} Seed s gives every arm the same prompts, "
        "sampling stream and rounding key."
        + (" The calibration of the embedded default is in [CALIBRATION.md](CALIBRATION.md)." if paper else "")
        + (f" Wall time of the sweep: {a.timing}." if a.timing else ""))
    add("")
    data_rel = os.path.relpath(os.path.join(os.path.abspath(a.plots), DATA_FILE),
                               os.path.dirname(os.path.abspath(a.results)))
    add(f"Data: [{data_rel}]({data_rel}), every run's per-step series as this report read them; "
        f"`scripts/paper_report.py --data {from_root(os.path.join(a.plots, DATA_FILE))} "
        f"--results {from_root(a.results)}` renders this "
        "report from it, and `scripts/reports.py --check` checks that it does, byte for byte.")
    add("")
    grids = sorted({r.bits for rs in runs.values() for r in rs})
    if grids != [0]:
        add(f"**Grid-scaled analog, not a real format**: every arm runs with `precision.analog_mantissa_bits` "
            f"{', '.join(str(b) for b in grids)}: the BF16 arms round to that many mantissa bits instead of 7 (a grid "
            f"{', '.join(str(2 ** (7 - b)) for b in grids)}x coarser than BF16's, so the same drift is that many times "
            "fewer half-ulps), and every arm, FP16 included, starts from the base rounded onto that grid "
            "(docs/PRECISION.md). It puts the small policy where an LLM's updates sit against BF16's grid; the "
            "real-format results are the other reports.")
        add("")
    fp8 = sorted({r.mode for rs in runs.values() for r in rs if r.mode in FP8_MODES})
    if fp8:
        add(f"**FP8 E4M3, a real format**: the arms named FP8 run `precision.mode` {', '.join(fp8)}: the linear layers' "
            "weights are E4M3 values (3 mantissa bits, BF16 has 7) with a power-of-two scale per output channel taken "
            "from the master at each step, the embedding, norms and head BF16 (docs/PRECISION.md, the FP8 contract). "
            "Every arm, FP16 included, starts from the base rounded to nearest on that grid (`grpo.round_base_to_fp8`), "
            "so the arms start from the same weights. The claims and verdict rules are the BF16 report's, unchanged, "
            "with FP8 in BF16's place. "
            + ("The drift section measures FP16's drift in half-ulps of that grid." if drift else
               "This sweep ran without the drift analysis."))
        add("")
    ps = sweep.get("pool_stats")
    if ps:
        pass_k = ps[f"pass_at_{ps['k']}"]
        hist = " ".join(str(h) for h in ps["histogram"])
        add(f"Prompts: the pool `{sweep.get('pool_path')}` built from the base by `scripts/paper_pool.py`: the first "
            f"{ps['records']} training prompts, each sampled {ps['k']} times at temperature 1, kept when solved "
            f"{ps['lo']:g}-{ps['hi']:g} of the time: {ps['kept']} prompts (base's solve rate on them "
            f"{ps['kept_mean_solve_rate']:.3f}; on all {ps['records']}: {ps['mean_solve_rate']:.3f}, pass@{ps['k']} "
            f"{pass_k:.3f}; prompts by correct samples 0..{ps['k']}: {hist})"
            + (f"; the sweep trains on its first {ps['size']} prompts" if ps.get("size") else "") +
            ". The trainer cycles the pool; *training reward* below is on its prompts, *eval accuracy* on "
            "the whole test set.")
        add("")
    elif sweep.get("pool_path"):
        add(f"Prompts: `{sweep['pool_path']}` (given by --pool).")
        add("")
    add("## Table")
    add("")
    add("| arm | mode | LR | final eval acc | steps to 50% | mean train reward | KL at end | "
        "KL at 50% | mean sticking | changed at end | s/step | seeds |")
    add("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for arm, r in rows.items():
        reached = [s for s in r["steps_to_target"] if s is not None]
        stt = format_ms(reached, 1) if reached else f"> {steps}"
        if 0 < len(reached) < n_seeds:
            stt += f" ({len(reached)}/{n_seeds} seeds)"
        add(f"| {labels.get(arm, arm)} | {r['mode']} | {r['lr']:.1e} | {format_ms(r['final_eval'])} | {stt} | "
            f"{format_ms(r['reward_auc'])} | {format_ms(r['kl_end'], sci=True)} | "
            f"{format_ms(r['kl_at_matched'], sci=True)} | {format_ms(r['sticking'])} | {format_ms(r['changed_end'])} | "
            f"{np.mean(r['seconds']) / steps:.2f} | {n_seeds} |")
    add("")
    add("Definitions (mean ± sample standard deviation over seeds):")
    add(f"* *final eval acc*: greedy accuracy on {sweep['eval_samples']} test records after the last step.")
    gains = ", ".join(f"s{s}: {levels.start[s]:.3f} / {levels.gain[s]:+.3f}" for s in sorted(levels.start))
    add(f"* *{ref_label}'s gain* per seed: its training reward averaged over its last {w} steps minus the same "
        f"over its first {w} steps (the start); the levels at 25/50/75% of the gain are start + q x gain. "
        f"Start / gain per seed: {gains}.")
    add(f"* *steps to 50%*: first step (from step {w} on) at which the run's training reward ({w}-step moving "
        f"average) reaches its seed's level at 50% of {ref_label}'s gain; *KL at 50%*: the run's KL "
        f"({w}-step moving average) at that step (KL at matched reward).")
    add("* *mean train reward*: training reward averaged over all steps (area under the reward curve).")
    add(f"* *KL at end*: per-token KL(policy || reference) over the sampled completions, exact over the "
        f"vocabulary, averaged over the last {w} steps.")
    add("* *mean sticking*: fraction of compute-weight elements whose bits an optimizer step left "
        "unchanged, averaged over steps; *changed at end*: fraction differing from the start.")
    add("* *s/step*: wall seconds per GRPO step (rollout, reward, update; evaluation excluded).")
    add("")
    add(f"## Paired differences against {ref_label} (per seed)")
    add("")
    add("| arm | Δ mean train reward | Δ final eval acc | Δ KL at end |")
    add("|---|---|---|---|")
    for arm, rs in runs.items():
        if arm == ref:
            continue
        d_auc = paired(rs, runs[ref], lambda r: r.reward.mean())
        d_eval = paired(rs, runs[ref], lambda r: r.eval_acc[-1])
        d_kl = paired(rs, runs[ref], lambda r: r.kl[-w:].mean())
        add(f"| {labels.get(arm, arm)} | {describe_diffs(d_auc, 4)} | {describe_diffs(d_eval)} | "
            f"{describe_diffs(d_kl, sci=True)} |")
    add("")
    t_crit = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36}.get(n_seeds, 2.0)
    add("t = mean / (sd / sqrt(seeds)) of the paired differences (n/a with one seed)" + (
        f"; with {n_seeds} seeds |t| > {t_crit} is the two-sided 5% level of Student's t" if n_seeds > 1 else "") + (f"; the verdicts below use |t| > {T_CLEAR} (about one-sided 10% at "
                                                "3 seeds) as \"clearly nonzero\"." if paper else "."))
    add("")
    add(f"## Size of the effect, per seed (levels: {', '.join(f'{int(q * 100)}%' for q in LEVELS)} of "
        f"{ref_label}'s gain)")
    add("")
    add(f"| arm | steps to the level | Δ area under the reward curve vs {ref_label} | KL at the level (matched reward) | "
        f"Δ KL at the level vs {ref_label} (paired) |")
    add("|---|---|---|---|---|")
    for row in size_measures(runs, ref, levels, steps):
        arm = row.split(" | ")[0][2:]
        add(row.replace(f"| {arm} |", f"| {labels.get(arm, arm)} |", 1))
    add("")
    add(f"*Δ area*: the paired difference of the mean training reward over the run (the area between the two "
        f"reward curves per step); *relative*: divided by {ref_label}'s area above its start (its mean reward "
        "minus its start). A level not reached within the run reads > steps; its KL reads n/a.")
    add("")
    outcomes = write_verdicts(add, a, runs, rows, levels, steps, w) if paper else None
    if drift:
        write_drift(add, drift, labels)
    # The phase diagram (paper/phase.py: docs/results/phase for the CPU presets,
    # docs/results/<plots>-phase for the others), if it was run from this sweep's base policy: another
    # base's lags (the CPU sweeps' in the GPU report) would read as this model's.
    # The grid-scaled analog's diagram (docs/results/phase-analog) follows the real formats' one.
    plots_dir = os.path.abspath(a.plots)
    for names in (("phase", os.path.basename(plots_dir) + "-phase"), ("phase-analog",)):
        phase, phase_json = None, None
        for name in names:
            path = os.path.join(os.path.dirname(plots_dir), name, "phase.json")
            # (an FP8 sweep's report embeds no BF16 diagram: its arm names would read as FP8's)
            candidate = json.load(open(path)) if paper and not fp8 and os.path.exists(path) else None
            if candidate and same_base(candidate, sweep):
                phase, phase_json = candidate, path
        if phase:
            rel_phase = os.path.relpath(os.path.dirname(phase_json), os.path.dirname(os.path.abspath(a.results)))
            for line in phase_markdown(phase, rel_phase):
                add(line)
    # The other sweeps of the same base (docs/results/{quick,fp8,quick-analog*}/summary.json) after a
    # real-format sweep's verdicts: the claims on BF16, on FP8 and where the analog reaches the regime the
    # real formats miss on this policy. (Written after the FP8 renaming below: the rows name their own grids.)
    own_lines = len(lines)
    if outcomes is not None:
        own = sweep_summary(sweep, runs, levels, outcomes, None, drift)
        summary_path = os.path.join(plots_dir, "summary.json")
        results_doc = os.path.relpath(os.path.abspath(a.results), os.path.dirname(summary_path))
        if write_summary:
            with open(summary_path + ".tmp", "w") as f:
                json.dump(dict(own, results=results_doc), f, indent=1)
            os.replace(summary_path + ".tmp", summary_path)
        others = []
        for name in ("quick", "fp8", "quick-analog", "quick-analog-pool"):
            path = os.path.join(os.path.dirname(plots_dir), name, "summary.json")
            sm = json.load(open(path)) if os.path.exists(path) and os.path.abspath(path) != summary_path else None
            if sm and same_base(sm, sweep) and own["bits"] == [0]:
                sm["results"] = os.path.join(os.path.dirname(path), sm["results"])
                others.append(sm)
        if others:
            results_dir = os.path.dirname(os.path.abspath(a.results))
            grids_section(add, [own] + others, lambda p: os.path.relpath(os.path.abspath(p), results_dir))
    add("## Plots")
    add("")
    rel = os.path.relpath(a.plots, os.path.dirname(os.path.abspath(a.results)) or ".")
    for p in plots:
        add(f"![{p}]({rel}/{p})")
        add("")
    text, tail = "\n".join(lines[:own_lines]) + "\n", "\n".join(lines[own_lines:]) + "\n"
    if fp8:  # the rules' texts name BF16's arms: here they are FP8's
        for bf16, fp8_name in (("BF16-RN", "FP8-RN"), ("BF16-SR", "FP8-SR"), ("BF16 round-to-nearest", "FP8 round-to-nearest"),
                               ("BF16 with stochastic rounding", "FP8 with stochastic rounding"),
                               ("FP16 vs BF16 vs", "FP16 vs FP8 vs"), ("BF16 at a higher LR", "FP8 at a higher LR"),
                               ("* *bf16_sr*:", "* *FP8-SR @ x* (arm bf16_sr):")):
            text = text.replace(bf16, fp8_name)
    return text + tail


def write_verdicts(add, a, runs, rows, levels, steps, w):
    add("## Verdicts on the claims of arXiv 2611.13545")
    add("")
    ref_runs = runs["fp16"] if "fp16" in runs else next(iter(runs.values()))
    fp16_area = float(np.mean([r.reward.mean() - r.reward[:w].mean() for r in ref_runs]))
    fp16_kl = float(np.mean([r.kl[-w:].mean() for r in ref_runs]))
    tolerances = (REL_TOLERANCE * abs(fp16_area), REL_TOLERANCE * abs(fp16_kl))
    add(f"Rules: no claim can read reproduced unless FP16's gain (above) reaches **{a.min_gain}** absolute "
        f"training reward in every seed (`--min-gain`; below it the tolerances, which scale with the gain, "
        f"shrink to noise). Two arms differ when the per-seed paired differences are clearly on one side of zero "
        f"(|t| > {T_CLEAR}) *and* by more than a tolerance: for speed, {int(REL_TOLERANCE * 100)}% of FP16's area "
        f"gain (its mean training reward over the run minus its mean over the first {w} steps; tolerance "
        f"{tolerances[0]:.4f}); for KL, {int(REL_TOLERANCE * 100)}% of FP16's KL at the end ({tolerances[1]:.2e}). "
        "Otherwise they count as the same; a difference that is clear but below the tolerance is named as such. "
        "*Speed* is the mean training reward over the run; the KL is judged at the end and at matched reward "
        "(the first step a run reaches 50% of FP16's gain: the KL a run pays for the same progress).")
    add("")
    claims = claim_verdicts(runs, rows, levels, tolerances, w, a.min_gain)
    for line in claims:
        add(line)
    add("")
    add("## Size targets (issue 16)")
    add("")
    add(f"Each target is judged per seed on the levels above and needs FP16's gain >= {a.min_gain} in every seed.")
    add("")
    targets = size_targets(runs, levels, steps, a.min_gain)
    for rule, result in targets:
        add(f"* {rule} Result: {result}.")
    add("")
    add("## Regime targets (issue 16, item 2)")
    add("")
    add("Whether the sweep sits in the paper's regime (measured on its own runs; docs/CALIBRATION.md says why a "
        "target is missed and what was tried):")
    add("")
    regime = regime_targets(runs, levels)
    for line in regime:
        add(line)
    add("")
    outcomes = {"claims": [first_bold(line) for line in claims if line[:1].isdigit()],
                "targets": [first_bold(result) for _, result in targets],
                "regime": [first_bold(line.split("Result:", 1)[-1]) for line in regime]}
    if all(arm in runs for arm in ("fp16", "bf16", "bf16_lr_k")):
        k0 = runs["bf16_lr_k"][0].lr / runs["bf16"][0].lr
        ks = calibrated_k(levels, runs["bf16"], runs["bf16_lr_k"], runs["fp16"], k0)
        found = [k for k, _ in ks.values() if k is not None]
        add("## k for BF16-RN @ k*x, calibrated on this sweep")
        add("")
        add(f"The k at which BF16-RN @ k*x would need FP16 @ x's steps to 50% of FP16's gain, per seed, from a "
            f"power law steps ~ LR^-a through BF16-RN @ x and @ {k0:g}x (the k this sweep ran): "
            + "; ".join(f"s{s}: {fmt(k, 2)} ({note})" for s, (k, note) in sorted(ks.items()))
            + (f". Median k: {float(np.median(found)):.2f}." if found else "."))
        add("")
    if "bf16_sr" in runs and "fp16" in runs:
        add("## Stochastic rounding's own noise (issue 16, item 7)")
        add("")
        add(f"Stochastic rounding perturbs the compute weights at every step, which costs KL of its own. *Early KL*: "
            f"a run's mean KL to the reference over steps 2-{w + 1} (step 1 samples from the base in every arm), "
            "paired per seed against FP16 @ x:")
        add("")
        for line in sr_noise(runs, w):
            add(line)
        add("")
        add("Does BF16-SR @ x pay less KL than BF16-RN @ k*x for the same progress (the paper's claim), at matched "
            f"reward, with the claims' rule (|t| > {T_CLEAR} and more than {int(REL_TOLERANCE * 100)}% of FP16's KL at "
            "the end)?")
        add("")
        for line in sr_vs_higher_lr(runs, levels, tolerances[1], a.min_gain):
            add(line)
        add("")
    return outcomes


def from_root(path):
    """A path as written in a report: relative to the repository root when inside it (so the report reads
    the same whichever folder its command ran from)."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def first_bold(text):
    """The first **bold** phrase of a verdict line: its outcome ("reproduced", "met", ...)."""
    m = re.search(r"\*\*([^*]+)\*\*", text)
    return m.group(1) if m else "n/a"


def sweep_summary(sweep, runs, levels, outcomes, results, drift):
    """What the quick report shows of another sweep (docs/results/<name>/summary.json): its setting,
    FP16's gain, Q (FP16's median drift at 50% of its gain, in half-ulps of the sweep's grid, when the
    drift analysis ran) and BF16-RN's area lag per seed, and the outcomes of its verdicts."""
    bits = sorted({r.bits for rs in runs.values() for r in rs})
    pool = sweep.get("pool")
    lag = {}
    if "fp16" in runs and "bf16" in runs:
        bf16 = {r.seed: r for r in runs["bf16"]}
        lag = {r.seed: area_lag(levels, r, bf16[r.seed]) for r in runs["fp16"] if r.seed in bf16}
    lr = {arm: rs[0].lr for arm, rs in runs.items()}
    fp8 = any(r.mode in FP8_MODES for rs in runs.values() for r in rs)
    return {"base": sweep.get("base"), "base_sha256": sweep.get("base_sha256"), "results": results, "command": sweep.get("command"), "bits": bits, "fp8": fp8,
            "prompts": (pool.get("size") if isinstance(pool, dict) else None) or sweep.get("pool_stats", {}).get("kept"),
            "x": lr.get("fp16"),
            "k": lr["bf16_lr_k"] / lr["bf16"] if "bf16_lr_k" in lr and "bf16" in lr else None,
            "seeds": len(next(iter(runs.values()))), "gain": {str(s): g for s, g in sorted(levels.gain.items())},
            "lag": {str(s): v for s, v in sorted(lag.items()) if v is not None},
            "q50": {str(r["seed"]): r["median"] for r in (drift or {}).get("rows", []) if r["level"] == "50%"},
            **outcomes}


def grids_section(add, summaries, rel):
    """Markdown: the verdict outcomes of this sweep and of the other sweeps of the same base (BF16, FP8
    E4M3, the grid-scaled analog), one row each."""
    add("## The claims across grids: BF16, FP8 E4M3 and the grid-scaled analog")
    add("")
    add("The same arms, seeds, rules and base on sweeps whose round-to-nearest and stochastic arms round to "
        "another grid; each has its own report. The first row is this sweep. Rows are the sweeps of this base policy: "
        "the same model file (its SHA-256 in each sweep's record), not only the same folder; a base retrained "
        "there is another policy and its sweeps are left out. BF16 and FP8 E4M3 (3 mantissa bits "
        "with a power-of-two scale per output channel on the layers' matrices, `precision.mode` fp8_rn / fp8_sr) "
        "are real formats. **The analog rows are not a real format**: BF16 with fewer mantissa bits "
        "(`precision.analog_mantissa_bits`, docs/PRECISION.md: a grid 2^(7 - bits) times coarser than BF16's, so "
        "FP16's drift is that many times fewer half-ulps, as in a larger model). *Q*: FP16's median drift from the "
        "base at 50% of its gain, in half-ulps of the row's grid (the drift section; round-to-nearest moves a "
        "weight once it passes 1), the measure of how far the paper's regime is. *RN arm*: the row's "
        "round-to-nearest arm at x (BF16-RN, FP8-RN or the analog's). Outcomes as in the sections above: claims "
        "1-3, targets T1-T3, and the regime targets FP16's gain >= 0.3, the RN arm's sticking >= 0.97 and "
        "changed at end <= 0.5.")
    add("")
    add("| sweep | grid | prompts | x, k | FP16 gain per seed | Q per seed | RN arm's area lag per seed | "
        "claims 1 / 2 / 3 | T1 / T2 / T3 | gain / sticking / changed |")
    add("|---|---|---|---|---|---|---|---|---|---|")
    for sm in summaries:
        grid = "FP8 E4M3" if sm.get("fp8") else ", ".join(grid_name(b) for b in sm["bits"])
        name = f"[{os.path.basename(sm['results'])}]({rel(sm['results'])})" if sm.get("results") else "this sweep"
        k = f", k = {sm['k']:g}" if sm.get("k") else ""
        add(f"| {name} | {grid} | {sm['prompts'] or 'n/a'} | {sm['x']:g}{k} | "
            + ", ".join(f"{v:+.3f}" for v in sm["gain"].values()) + " | "
            + (", ".join(f"{v:.2f}" for v in sm.get("q50", {}).values()) or "n/a") + " | "
            + (", ".join(f"{100 * v:.0f}%" for v in sm["lag"].values()) or "n/a") + " | "
            + " / ".join(sm["claims"]) + " | " + " / ".join(sm["targets"]) + " | " + " / ".join(sm["regime"]) + " |")
    add("")


def write_drift(add, drift, labels):
    arm = labels.get(drift["arm"], drift["arm"]).split(" @")[0]
    grid = drift.get("grid", "BF16")  # drift.json written before the analog: BF16
    probed = any(row.get("probe") for row in drift["rows"])
    add(f"## Drift of {arm}'s weights in {grid} half-ulps" + (", and the retained-gain probe" if probed else ""))
    add("")
    add(drift["definition"] + ("" if probed else " The retained-gain probe was not run for this sweep."))
    add("")
    add("| seed | level | step (checkpoint) | median drift | mean drift | drift < 1 half-ulp |"
        + (f" eval acc: base / {arm} weights / {grid}-rounded | retained gain |" if probed else ""))
    add("|---|---|---|---|---|---|" + ("---|---|" if probed else ""))
    for row in drift["rows"]:
        probe = row.get("probe") or {}
        accs = (f"{probe['base']:.3f} / {probe['unrounded']:.3f} / {probe['bf16_rounded']:.3f}" if probe else "n/a")
        add(f"| s{row['seed']} | {row['level']} | {row['target_step']} ({row['step']}) | {row['median']:.2f} | "
            f"{row['mean']:.2f} | {row['below_one']:.3f} |"
            + (f" {accs} | {fmt(probe.get('retained'), 2)} |" if probed else ""))
    add("")
    fp8_rows = [row for row in drift["rows"] if row.get("fp8_matrices")]
    if fp8_rows:
        share = fp8_rows[0]["fp8_matrices"]["fraction_of_weights"]
        add(f"The layers' matrices alone (E4M3 with per-channel scales, {100 * share:.1f}% of the nonzero weights; "
            "the rest is BF16): " + "; ".join(
                f"s{row['seed']} {row['level']}: median {row['fp8_matrices']['median']:.2f}, "
                f"{row['fp8_matrices']['below_one']:.3f} below 1 half-ulp" for row in fp8_rows) + ".")
        add("")
    series = drift.get("series", [])
    for s in sorted({p["seed"] for p in series}):
        add(f"* s{s}, median drift (half-ulps) at every kept checkpoint, step: value: "
            + ", ".join(f"{p['step']}: {p['median']:.2f}" for p in series if p["seed"] == s) + ".")
    if series:
        add("")
