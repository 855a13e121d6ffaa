#!/usr/bin/env python3
"""Plots, table and verdicts of a reproduction sweep (scripts/reproduce.sh) -> RESULTS.md + PNGs.

Reads <sweep>/sweep.json, <sweep>/base_eval.json and <sweep>/<arm>/seed<k>/metrics.jsonl. Every
number in the output is computed here from those files; the definitions are written into the
report next to the numbers.

    .venv/bin/python scripts/paper_report.py --sweep runs/paper-quick --results docs/RESULTS.md \
        --plots docs/results/quick
"""
import argparse
import json
import math
import os
import sys

import numpy as np

REFERENCE_ARM = "fp16"
ARM_LABELS = {
    "fp32": "FP32 (control)",
    "fp16": "FP16 @ x",
    "bf16": "BF16-RN @ x",
    "bf16_lr_k": "BF16-RN @ k*x",
    "bf16_sr": "BF16-SR @ x",
    "fp16_sr": "FP16-SR @ x",
}
ARM_COLORS = {"fp32": "black", "fp16": "tab:blue", "bf16": "tab:red", "bf16_lr_k": "tab:orange",
              "bf16_sr": "tab:green", "fp16_sr": "tab:purple"}


class ReportError(Exception):
    pass


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ReportError(f"{path}:{n}: not JSON ({e})")
    return rows


def read_yaml_scalar(path, section, key):
    """The value of `section.key` in a resolved config.yaml (flat two-level YAML we write)."""
    current = None
    with open(path) as f:
        for line in f:
            stripped = line.split("#", 1)[0].rstrip()
            if not stripped:
                continue
            if not line.startswith(" ") and stripped.endswith(":"):
                current = stripped[:-1]
            elif current == section and stripped.strip().startswith(key + ":"):
                return stripped.split(":", 1)[1].strip()
    raise ReportError(f"{path}: no {section}.{key}")


class Run:
    def __init__(self, arm, seed, directory, steps):
        self.arm, self.seed, self.dir = arm, seed, directory
        path = os.path.join(directory, "metrics.jsonl")
        if not os.path.exists(path):
            raise ReportError(f"run {arm} seed {seed}: {path} is missing (run the sweep first)")
        rows = read_jsonl(path)
        if len(rows) < steps or [r["step"] for r in rows[:steps]] != list(range(1, steps + 1)):
            raise ReportError(f"{path}: expected steps 1..{steps}, found {len(rows)} lines "
                              "(an unfinished run; rerun scripts/reproduce.sh to finish it)")
        rows = rows[:steps]
        self.step = np.arange(1, steps + 1)
        col = lambda k: np.array([r[k] for r in rows], dtype=float)
        self.reward = col("reward_mean")
        self.accuracy = col("accuracy")
        self.kl = col("kl_ref_exact")
        self.sticking = col("sticking_frac")
        self.changed = col("changed_from_start_frac")
        self.eval_step = np.array([r["step"] for r in rows if "eval_accuracy" in r])
        self.eval_acc = np.array([r["eval_accuracy"] for r in rows if "eval_accuracy" in r])
        cfg = os.path.join(directory, "config.yaml")
        self.lr = float(read_yaml_scalar(cfg, "optim", "lr"))
        self.mode = read_yaml_scalar(cfg, "precision", "mode")
        self.seconds = float(col("step_seconds").sum())


def smooth(x, w):
    """Trailing moving average (window w, shorter at the start)."""
    c = np.cumsum(np.insert(x, 0, 0.0))
    out = np.empty_like(x)
    for i in range(len(x)):
        lo = max(0, i + 1 - w)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def first_crossing(curve, level, skip=0):
    """1-based index of the first element >= level after the first `skip` elements, or None."""
    idx = np.nonzero(curve[skip:] >= level)[0]
    return int(idx[0]) + 1 + skip if len(idx) else None


def mean_sd(values):
    v = np.array([x for x in values if x is not None], dtype=float)
    if len(v) == 0:
        return None, None, 0
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, len(v)


def fmt(x, digits=3, sci=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.2e}" if sci else f"{x:.{digits}f}"


def fmt_ms(values, digits=3, sci=False):
    m, s, n = mean_sd(values)
    if m is None:
        return "n/a"
    return f"{fmt(m, digits, sci)} ± {fmt(s, digits, sci)}"


def t_stat(diffs):
    v = np.array(list(diffs.values()), dtype=float)
    if len(v) < 2:
        return float("nan")
    se = v.std(ddof=1) / math.sqrt(len(v))
    if se == 0:
        return math.copysign(float("inf"), v.mean()) if v.mean() != 0 else 0.0
    return float(v.mean() / se)


def kl_at_accuracy(run, level, w):
    """Smoothed KL of a run at the first step its smoothed training accuracy reaches `level`."""
    step = first_crossing(smooth(run.accuracy, w), level, skip=w - 1)
    return None if step is None else float(smooth(run.kl, w)[step - 1])


def paired(a_runs, b_runs, metric):
    """Per-seed differences metric(a) - metric(b) over the seeds both arms have; seeds where the
    metric is None (a level not reached) are left out."""
    b_by_seed = {r.seed: r for r in b_runs}
    out = {}
    for r in a_runs:
        if r.seed in b_by_seed:
            x, y = metric(r), metric(b_by_seed[r.seed])
            if x is not None and y is not None:
                out[r.seed] = x - y
    return out


def describe_diffs(diffs, digits=3, sci=False):
    v = list(diffs.values())
    per_seed = ", ".join(f"s{s}: {fmt(d, digits, sci)}" for s, d in sorted(diffs.items()))
    m = float(np.mean(v)) if v else float("nan")
    return f"{fmt(m, digits, sci)} (t = {fmt(t_stat(diffs), 1)}; {per_seed})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True, help="sweep folder written by scripts/reproduce.sh")
    ap.add_argument("--results", required=True, help="markdown file to write (e.g. docs/RESULTS.md)")
    ap.add_argument("--plots", required=True, help="folder for the PNG plots")
    ap.add_argument("--timing", default="", help="wall time of the sweep, as a phrase for the report")
    a = ap.parse_args()
    try:
        report(a)
    except ReportError as e:
        print(f"paper_report.py: error: {e}", file=sys.stderr)
        sys.exit(2)


def report(a):
    sweep_path = os.path.join(a.sweep, "sweep.json")
    if not os.path.exists(sweep_path):
        raise ReportError(f"{sweep_path} is missing: not a sweep folder of scripts/reproduce.sh")
    sweep = json.load(open(sweep_path))
    steps, n_seeds, arms = int(sweep["steps"]), int(sweep["seeds"]), sweep["arms"].split()
    base_eval = json.load(open(os.path.join(a.sweep, "base_eval.json")))["greedy_accuracy"]
    runs = {arm: [Run(arm, s, os.path.join(a.sweep, arm, f"seed{s}"), steps) for s in range(1, n_seeds + 1)]
            for arm in arms}
    ref = REFERENCE_ARM if REFERENCE_ARM in runs else arms[0]
    w = max(3, steps // 10)  # smoothing window and "final" window, in steps

    # ---- summary numbers per arm
    # Accuracy levels per seed (a seed's arms see the same prompts, so they share a starting level):
    # the target is halfway from the start to FP16's final level; the matched level is the lowest
    # final smoothed accuracy among the arms, so every arm of the seed reaches it.
    seeds = [r.seed for r in runs[ref]]
    start = {s: float(np.mean([r.accuracy[:w].mean() for rs in runs.values() for r in rs if r.seed == s]))
             for s in seeds}
    target = {r.seed: start[r.seed] + 0.5 * (r.accuracy[-w:].mean() - start[r.seed]) for r in runs[ref]}
    matched = {s: min(smooth(r.accuracy, w)[-1] for rs in runs.values() for r in rs if r.seed == s) for s in seeds}

    rows = {}
    for arm, rs in runs.items():
        rows[arm] = {
            "lr": rs[0].lr,
            "mode": rs[0].mode,
            "final_eval": [r.eval_acc[-1] for r in rs],
            "reward_auc": [r.reward.mean() for r in rs],
            "steps_to_target": [first_crossing(smooth(r.accuracy, w), target[r.seed], skip=w - 1) for r in rs],
            "kl_end": [r.kl[-w:].mean() for r in rs],
            "kl_at_matched": [kl_at_accuracy(r, matched[r.seed], w) for r in rs],
            "sticking": [r.sticking.mean() for r in rs],
            "changed_end": [r.changed[-1] for r in rs],
            "seconds": [r.seconds for r in rs],
        }

    os.makedirs(a.plots, exist_ok=True)
    plots = make_plots(runs, w, a.plots)
    write_markdown(a, sweep, runs, rows, ref, w, start, target, matched, base_eval, plots)


def make_plots(runs, w, folder):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def band(ax, x, curves, arm):
        c = np.array(curves)
        m = c.mean(axis=0)
        lo, hi = (c.min(axis=0), c.max(axis=0)) if len(c) > 1 else (m, m)
        ax.plot(x, m, color=ARM_COLORS.get(arm), label=ARM_LABELS.get(arm, arm), lw=1.6)
        ax.fill_between(x, lo, hi, color=ARM_COLORS.get(arm), alpha=0.15, lw=0)

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
        ax.plot(x, y, color=ARM_COLORS.get(arm), label=ARM_LABELS.get(arm, arm), lw=1.6)
        ax.scatter(x[-1:], y[-1:], color=ARM_COLORS.get(arm), s=20)
    finish(fig, ax, "kl_vs_reward.png", f"training reward ({w}-step moving average)",
           "KL(policy || reference) per token",
           f"KL vs reward along training ({band_note.split(',')[0]}; dot = last step)")
    written.insert(3, "kl_vs_reward.png")
    # The paired view: each arm's running mean of (its reward - FP16's reward) per step, same seed.
    if REFERENCE_ARM in runs:
        ref_by_seed = {r.seed: r for r in runs[REFERENCE_ARM]}
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for arm, rs in runs.items():
            if arm == REFERENCE_ARM:
                continue
            curves = [np.cumsum(r.reward - ref_by_seed[r.seed].reward) / r.step for r in rs if r.seed in ref_by_seed]
            band(ax, rs[0].step, curves, arm)
        ax.axhline(0, color="tab:blue", lw=1, ls="--", label=ARM_LABELS[REFERENCE_ARM])
        finish(fig, ax, "paired_reward_vs_fp16.png", "GRPO step", "running mean of reward minus FP16's (same seed)",
               f"paired difference to FP16 @ x ({band_note})")
        written.insert(1, "paired_reward_vs_fp16.png")
    return written


def compare(diffs, tol):
    """'lower' / 'higher' when the paired differences are clearly (|t| > 2) and materially (|mean| >
    tol) on one side of zero; 'same' otherwise; None without at least 2 pairs."""
    if len(diffs) < 2:
        return None
    m, t = float(np.mean(list(diffs.values()))), t_stat(diffs)
    if m < -tol and t < -2:
        return "lower"
    if m > tol and t > 2:
        return "higher"
    return "same"


def verdicts(runs, rows, ref, matched, tolerances, w):
    """The three claims, judged with the stated rules on the paired per-seed differences."""
    out = []
    if not all(arm in runs for arm in ("fp16", "bf16", "bf16_lr_k", "bf16_sr")):
        return ["Verdicts need the arms fp16, bf16, bf16_lr_k and bf16_sr; this sweep lacks some."]
    if len(runs["fp16"]) < 2:
        return ["No verdicts: paired differences over a single seed have no noise estimate (run at least "
                "2 seeds; the presets --quick and --full run 3 and 5)."]
    speed_tol, kl_tol = tolerances
    auc = lambda r: r.reward.mean()
    kl_end = lambda r: r.kl[-w:].mean()
    kl_matched = lambda r: kl_at_accuracy(r, matched[r.seed], w)
    speed_word = {"lower": "slower than", "same": "the same speed as", "higher": "faster than"}

    d1 = paired(runs["bf16"], runs["fp16"], auc)
    c1, m1 = compare(d1, speed_tol), float(np.mean(list(d1.values())))
    fp16_gain = speed_tol * 10
    if c1 == "lower":
        v1 = "**reproduced**"
    elif compare(d1, 0.0) == "lower":
        v1 = (f"**reproduced in direction, not in size**: BF16-RN is consistently slower, by "
              f"{-m1:.4f} mean reward, {100 * -m1 / fp16_gain:.0f}% of FP16's gain, below the tolerance")
    elif m1 < 0:
        v1 = "**not reproduced**: same sign as the claim, but within the seed noise"
    else:
        v1 = "**not reproduced**: BF16-RN is not slower"
    out.append(f"1. *BF16 round-to-nearest learns more slowly than FP16 at the same LR*: {v1}. Paired "
               f"difference of the mean training reward over the run (BF16-RN @ x minus FP16 @ x): "
               f"{describe_diffs(d1, 4)}. Final greedy eval accuracy: BF16-RN {fmt_ms(rows['bf16']['final_eval'])} "
               f"vs FP16 {fmt_ms(rows['fp16']['final_eval'])}; compute weights changed since the start at "
               f"the end: BF16-RN {fmt_ms(rows['bf16']['changed_end'], 3)} vs FP16 "
               f"{fmt_ms(rows['fp16']['changed_end'], 3)}; mean per-step sticking BF16-RN "
               f"{fmt_ms(rows['bf16']['sticking'])} vs FP16 {fmt_ms(rows['fp16']['sticking'])}.")

    def kl_claim(n, claim, arm, kl_ref, direction, arm_label, ref_label):
        """Claims 2 and 3: `arm` keeps FP16's speed (or beats it) and its KL against `kl_ref`'s is
        `direction` ('higher' / 'lower') at the end and at matched accuracy."""
        ds = paired(runs[arm], runs["fp16"], auc)
        dk = paired(runs[arm], runs[kl_ref], kl_end)
        dm = paired(runs[arm], runs[kl_ref], kl_matched)
        cs, ck, cm = compare(ds, speed_tol), compare(dk, kl_tol), compare(dm, kl_tol)
        kl_word = f"{direction} KL than {ref_label}"
        if cs == "lower":
            v = f"**not reproduced**: {arm_label} is slower than FP16"
        elif ck == direction and cm == direction:
            v = f"**reproduced** ({speed_word[cs]} FP16, {kl_word} at the end and at matched accuracy)"
        elif ck == direction:
            v = (f"**partly reproduced**: {speed_word[cs]} FP16 with a {kl_word} at the end, but not at "
                 "matched accuracy (the KL difference comes with a difference in progress)")
        else:
            v = f"**not reproduced**: {speed_word[cs]} FP16, but not a {kl_word}"
        out.append(f"{n}. *{claim}*: {v}. Speed, paired difference of the mean training reward ({arm_label} "
                   f"minus FP16 @ x): {describe_diffs(ds, 4)}. KL at the end, paired difference ({arm_label} "
                   f"minus {ref_label}): {describe_diffs(dk, sci=True)}. KL at matched training accuracy, "
                   f"paired difference: "
                   f"{describe_diffs(dm, sci=True) if dm else 'n/a (level not reached)'}.")

    kl_claim(2, "BF16 at a higher LR (k*x) matches FP16's speed but ends with a higher KL", "bf16_lr_k",
             "fp16", "higher", "BF16-RN @ k*x", "FP16 @ x")
    kl_claim(3, "BF16 with stochastic rounding matches FP16's speed with a lower KL than (2)", "bf16_sr",
             "bf16_lr_k", "lower", "BF16-SR @ x", "BF16-RN @ k*x")
    return out


def write_markdown(a, sweep, runs, rows, ref, w, start, target, matched, base_eval, plots):
    n_seeds = len(next(iter(runs.values())))
    steps = len(next(iter(runs.values()))[0].step)
    lines = []
    add = lines.append
    add("# Results: FP16 vs BF16 vs BF16 with stochastic rounding in GRPO")
    add("")
    add("<!-- Generated by scripts/paper_report.py from the sweep's metrics; do not edit by hand. -->")
    add("")
    add(f"Produced by `{sweep['command']}` at commit {sweep.get('commit', 'unknown')} (sweep folder `{a.sweep}`, "
        f"preset `{sweep['preset']}`): "
        f"{len(runs)} arms x {n_seeds} paired seeds x {steps} GRPO steps from the base policy "
        f"`{sweep['base']}` (greedy eval accuracy of the base with BF16 weights: {base_eval:.3f} on "
        f"{sweep['eval_samples']} test records). The arms' configs are `configs/paper/<arm>.yaml`; "
        "they differ only in `precision.mode` and `optim.lr`. Seed s gives every arm the same prompts, "
        "sampling stream and rounding key. The calibration of the embedded default is in "
        "[CALIBRATION.md](CALIBRATION.md)." + (f" Wall time of the sweep: {a.timing}." if a.timing else ""))
    add("")
    add("## Table")
    add("")
    add("| arm | mode | LR | final eval acc | steps to target | mean train reward | KL at end | "
        f"KL at matched acc | mean sticking | changed at end | s/step | seeds |")
    add("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for arm, r in rows.items():
        reached = [s for s in r["steps_to_target"] if s is not None]
        stt = fmt_ms(reached, 1) if reached else f"> {steps}"
        if 0 < len(reached) < n_seeds:
            stt += f" ({len(reached)}/{n_seeds} seeds)"
        add(f"| {ARM_LABELS.get(arm, arm)} | {r['mode']} | {r['lr']:.1e} | {fmt_ms(r['final_eval'])} | {stt} | "
            f"{fmt_ms(r['reward_auc'])} | {fmt_ms(r['kl_end'], sci=True)} | {fmt_ms(r['kl_at_matched'], sci=True)} | "
            f"{fmt_ms(r['sticking'])} | {fmt_ms(r['changed_end'])} | {np.mean(r['seconds']) / steps:.2f} | "
            f"{n_seeds} |")
    add("")
    add("Definitions (mean ± sample standard deviation over seeds):")
    add(f"* *final eval acc*: greedy accuracy on {sweep['eval_samples']} test records after the last step.")
    levels = ", ".join(f"s{s}: {start[s]:.3f} / {target[s]:.3f} / {matched[s]:.3f}" for s in sorted(start))
    add(f"* *steps to target*: first step (from step {w} on) at which the run's training accuracy ({w}-step "
        "moving average "
        f"of the fraction of correct rollouts) reaches its seed's target, halfway between the seed's start "
        f"(all arms' first {w} steps: they see the same prompts) and FP16's final level (its last {w} steps).")
    add("* *mean train reward*: training reward averaged over all steps (area under the reward curve, "
        "the speed measure of the verdicts).")
    add(f"* *KL at end*: per-token KL(policy || reference) over the sampled completions, exact over the "
        f"vocabulary, averaged over the last {w} steps. *KL at matched acc*: the run's KL ({w}-step moving "
        "average) at the first step where its smoothed training accuracy reaches its seed's matched level, "
        "the lowest final smoothed accuracy among the seed's arms (so every arm reaches it).")
    add(f"* Accuracy levels per seed, start / target / matched: {levels}.")
    add("* *mean sticking*: fraction of compute-weight elements whose bits an optimizer step left "
        "unchanged, averaged over steps; *changed at end*: fraction differing from the start.")
    add("* *s/step*: wall seconds per GRPO step (rollout, reward, update; evaluation excluded).")
    add("")
    add(f"## Paired differences against {ARM_LABELS.get(ref, ref)} (per seed)")
    add("")
    add("| arm | Δ mean train reward | Δ final eval acc | Δ KL at end |")
    add("|---|---|---|---|")
    for arm, rs in runs.items():
        if arm == ref:
            continue
        d_auc = paired(rs, runs[ref], lambda r: r.reward.mean())
        d_eval = paired(rs, runs[ref], lambda r: r.eval_acc[-1])
        d_kl = paired(rs, runs[ref], lambda r: r.kl[-w:].mean())
        add(f"| {ARM_LABELS.get(arm, arm)} | {describe_diffs(d_auc, 4)} | {describe_diffs(d_eval)} | "
            f"{describe_diffs(d_kl, sci=True)} |")
    add("")
    t_crit = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36}.get(n_seeds, 2.0)
    add(f"t = mean / (sd / sqrt(seeds)) of the paired differences; with {n_seeds} seeds |t| > {t_crit} is the "
        "two-sided 5% level of Student's t; the verdicts below use |t| > 2 (about one-sided 10% at 3 seeds) "
        "as \"clearly nonzero\".")
    add("")
    add("## Verdicts on the claims of arXiv 2611.13545")
    add("")
    fp16_gain = float(np.mean([r.reward.mean() - r.reward[:w].mean() for r in runs[ref]]))
    fp16_kl = float(np.mean([r.kl[-w:].mean() for r in runs[ref]]))
    tolerances = (0.1 * abs(fp16_gain), 0.1 * abs(fp16_kl))
    add("Rules: two arms differ when the per-seed paired differences are clearly on one side of zero "
        "(|t| > 2) *and* by more than a tolerance: for speed, 10% of FP16's gain (its mean training reward "
        f"over the run minus its mean over the first {w} steps; tolerance {tolerances[0]:.4f}); for KL, 10% of FP16's KL at the end "
        f"({tolerances[1]:.2e}). Otherwise they count as the same; a difference that is clear but below the "
        "tolerance is named as such. *Speed* is the mean training reward over the run; the KL is judged at "
        "the end and at matched training accuracy (the KL a run pays for the same progress).")
    add("")
    lines.extend(verdicts(runs, rows, ref, matched, tolerances, w))
    add("")
    add("## Plots")
    add("")
    rel = os.path.relpath(a.plots, os.path.dirname(os.path.abspath(a.results)) or ".")
    for p in plots:
        add(f"![{p}]({rel}/{p})")
        add("")
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    tmp = a.results + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, a.results)
    print(f"paper_report.py: wrote {a.results} and {len(plots)} plots in {a.plots}")


if __name__ == "__main__":
    main()
