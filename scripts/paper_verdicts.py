"""The measures and rules of the paper report (scripts/paper_report.py): paired per-seed differences,
steps to 25/50/75% of FP16's gain, paired areas under the reward curve, KL at matched reward, the
verdicts on the three claims of arXiv 2611.13545 and the size targets of issue 16.

Pure functions of the runs (objects with .seed, .reward, .kl arrays indexed by step - 1); every rule
is also written into the report next to its result, by the text functions here.
"""
import math

import numpy as np

# No claim can read "reproduced" and no target can be met unless FP16's training reward rose by at
# least this much (absolute, mean reward) in every seed: the tolerances scale with FP16's gain, so a
# vanishing gain would otherwise let noise-sized differences through.
MIN_FP16_GAIN = 0.05
LEVELS = (0.25, 0.5, 0.75)       # fractions of FP16's gain: the matched-reward levels
RN_SLOWDOWN_TARGET = 1.3         # BF16-RN needs >= this x FP16's steps to 50% of the gain, every seed
SR_WITHIN = 0.10                 # BF16-SR's steps to 50% within this fraction of FP16's, every seed
T_CLEAR = 2.0                    # |t| above this counts as "clearly nonzero"
REL_TOLERANCE = 0.10             # claims: a difference must exceed 10% of FP16's gain (or KL)


def smooth(x, w):
    """Trailing moving average (window w, shorter at the start)."""
    c = np.cumsum(np.insert(np.asarray(x, dtype=float), 0, 0.0))
    i = np.arange(1, len(x) + 1)
    lo = np.maximum(0, i - w)
    return (c[i] - c[lo]) / (i - lo)


def first_crossing(curve, level, skip=0):
    """1-based index of the first element >= level after the first `skip` elements, or None."""
    idx = np.nonzero(np.asarray(curve)[skip:] >= level)[0]
    return int(idx[0]) + 1 + skip if len(idx) else None


def t_stat(diffs):
    v = np.array(list(diffs.values()), dtype=float)
    if len(v) < 2:
        return float("nan")
    se = v.std(ddof=1) / math.sqrt(len(v))
    if se == 0:
        return math.copysign(float("inf"), v.mean()) if v.mean() != 0 else 0.0
    return float(v.mean() / se)


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


def fmt(x, digits=3, sci=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.2e}" if sci else f"{x:.{digits}f}"


def describe_diffs(diffs, digits=3, sci=False):
    v = list(diffs.values())
    per_seed = ", ".join(f"s{s}: {fmt(d, digits, sci)}" for s, d in sorted(diffs.items()))
    m = float(np.mean(v)) if v else float("nan")
    return f"{fmt(m, digits, sci)} (t = {fmt(t_stat(diffs), 1)}; {per_seed})"


def compare(diffs, tol):
    """'lower' / 'higher' when the paired differences are clearly (|t| > T_CLEAR) and materially
    (|mean| > tol) on one side of zero; 'same' otherwise; None without at least 2 pairs."""
    if len(diffs) < 2:
        return None
    m, t = float(np.mean(list(diffs.values()))), t_stat(diffs)
    if m < -tol and t < -T_CLEAR:
        return "lower"
    if m > tol and t > T_CLEAR:
        return "higher"
    return "same"


class GainLevels:
    """Per seed, FP16's start (mean reward of its first w steps), gain (mean of its last w steps
    minus the start) and the reward levels start + q * gain, q in LEVELS."""

    def __init__(self, ref_runs, w):
        self.w = w
        self.start = {r.seed: float(np.mean(r.reward[:w])) for r in ref_runs}
        self.gain = {r.seed: float(np.mean(r.reward[-w:])) - self.start[r.seed] for r in ref_runs}
        self.area = {r.seed: float(np.mean(r.reward - self.start[r.seed])) for r in ref_runs}

    def level(self, seed, q):
        return self.start[seed] + q * self.gain[seed]

    def sufficient(self, min_gain=MIN_FP16_GAIN):
        return bool(self.gain) and min(self.gain.values()) >= min_gain

    def steps_to(self, run, q):
        """First step (from step w on) where the run's w-step average reward reaches the level, or None."""
        return first_crossing(smooth(run.reward, self.w), self.level(run.seed, q), skip=self.w - 1)

    def kl_at(self, run, q):
        """The run's w-step average KL at the step it reaches the level (None: not reached)."""
        step = self.steps_to(run, q)
        return None if step is None else float(smooth(run.kl, self.w)[step - 1])

    def gain_note(self, min_gain):
        per_seed = ", ".join(f"s{s}: {g:.4f}" for s, g in sorted(self.gain.items()))
        return f"FP16's gain per seed ({per_seed}) against the minimum {min_gain}"


def steps_text(x, steps):
    return f"> {steps}" if x is None else str(x)


def area_lag(levels, ref_run, run):
    """`run`'s relative area lag behind the reference in their seed: the reference's mean training reward
    minus the run's, over the reference's area above its start (0: no lag; 1: no progress; negative:
    ahead); None when the reference has no area above its start."""
    area = levels.area[ref_run.seed]
    return float((ref_run.reward.mean() - run.reward.mean()) / area) if area > 0 else None


def size_measures(runs, ref, levels, steps):
    """Markdown rows: per arm, steps to 25/50/75% of FP16's gain per seed, the paired area
    difference and the KL at matched reward per level, paired against the reference arm."""
    rows = []
    for arm, rs in runs.items():
        stl = "; ".join(f"{int(q * 100)}%: " + ", ".join(f"s{r.seed} {steps_text(levels.steps_to(r, q), steps)}"
                                                         for r in rs) for q in LEVELS)
        area = paired(rs, runs[ref], lambda r: float(np.mean(r.reward)))
        rel = {s: d / levels.area[s] if levels.area.get(s) else float("nan") for s, d in area.items()}
        kls = "; ".join(f"{int(q * 100)}%: " + ", ".join(f"s{r.seed} {fmt(levels.kl_at(r, q), sci=True)}" for r in rs)
                        for q in LEVELS)
        area_txt = "-" if arm == ref else (f"{describe_diffs(area, 4)}; relative to the reference's area above its start: "
                                           + ", ".join(f"s{s}: {fmt(v, 3)}" for s, v in sorted(rel.items())))
        dkl = "-" if arm == ref else "; ".join(
            f"{int(q * 100)}%: " + (describe_diffs(d, sci=True) if d else "n/a")
            for q, d in ((q, paired(rs, runs[ref], lambda r, q=q: levels.kl_at(r, q))) for q in LEVELS))
        rows.append(f"| {arm} | {stl} | {area_txt} | {kls} | {dkl} |")
    return rows


def size_targets(runs, levels, steps, min_gain=MIN_FP16_GAIN):
    """The three targets of issue 16 as (rule, result) pairs of markdown text."""
    need = ("fp16", "bf16", "bf16_sr", "bf16_lr_k")
    rules = [
        f"*T1, BF16-RN is slow by the paper's size*: in every seed, BF16-RN @ x needs at least "
        f"{RN_SLOWDOWN_TARGET}x FP16 @ x's steps to 50% of FP16's gain (a level BF16-RN never reaches "
        f"counts as {steps} + 1 steps, a lower bound).",
        f"*T2, BF16-SR keeps FP16's speed*: in every seed, BF16-SR @ x's steps to 50% of FP16's gain are "
        f"within {int(SR_WITHIN * 100)}% of FP16's (|ratio - 1| <= {SR_WITHIN}; not reaching the level misses).",
        "*T3, the higher LR costs KL that SR does not*: in every seed, BF16-RN @ k*x has a higher KL to the "
        "reference than BF16-SR @ x at matched reward (the first step each reaches 50% of FP16's gain, "
        "w-step averages; a seed where either does not reach it misses).",
    ]
    if not all(a in runs for a in need):
        return [(r, "**not testable**: the sweep lacks one of the arms " + ", ".join(need)) for r in rules]
    by_seed = {arm: {r.seed: r for r in runs[arm]} for arm in need}
    seeds = sorted(by_seed["fp16"])
    steps50 = lambda arm, s: levels.steps_to(by_seed[arm][s], 0.5)

    def t1(s):  # -> (met in this seed, text)
        f, b = steps50("fp16", s), steps50("bf16", s)
        ratio = (steps + 1 if b is None else b) / f
        return ratio >= RN_SLOWDOWN_TARGET, f"s{s}: {steps_text(b, steps)} / {f} = {'>= ' if b is None else ''}{ratio:.2f}"

    def t2(s):
        f, b = steps50("fp16", s), steps50("bf16_sr", s)
        if b is None:
            return False, f"s{s}: > {steps} / {f} (not reached)"
        return abs(b / f - 1) <= SR_WITHIN + 1e-12, f"s{s}: {b} / {f} = {b / f:.2f}"

    def t3(s):
        k, r = levels.kl_at(by_seed["bf16_lr_k"][s], 0.5), levels.kl_at(by_seed["bf16_sr"][s], 0.5)
        if k is None or r is None:
            return False, f"s{s}: level not reached by {'BF16-RN @ k*x' if k is None else 'BF16-SR'}"
        return k > r, f"s{s}: {k:.2e} vs {r:.2e}"

    what = ["BF16-RN / FP16 steps to 50%", "BF16-SR / FP16 steps to 50%",
            "KL at 50% of FP16's gain, BF16-RN @ k*x vs BF16-SR"]
    out = []
    for rule, name, check in zip(rules, what, (t1, t2, t3)):
        per_seed = [check(s) for s in seeds]
        met = all(ok for ok, _ in per_seed)
        texts = "; ".join(t for _, t in per_seed)
        if not levels.sufficient(min_gain):  # the measurements are shown, the verdict is withheld
            out.append((rule, f"**not testable**: {levels.gain_note(min_gain)}: the gain is too small to size an "
                              f"effect against (measured, not a verdict: {name}: {texts})"))
        else:
            out.append((rule, f"**{'met' if met else 'missed'}** ({name}: {texts})"))
    return out


# The regime the quick preset aims at (issue 16, item 2), judged on the sweep's own runs.
REGIME_GAIN = 0.3        # FP16's training reward rises by at least this much
REGIME_STICKING = 0.97   # BF16-RN's mean per-step sticking at least this
REGIME_CHANGED = 0.5     # BF16-RN's fraction of compute weights changed at the end at most this


def regime_targets(runs, levels):
    """Markdown lines: the three regime targets with the per-seed measurements and, when missed, by
    how much (the worst seed's distance to the target)."""
    lines = []

    def line(name, values, target, higher_is_good, unit=""):
        per_seed = ", ".join(f"s{s}: {v:.3f}" for s, v in values)
        worst = min(v for _, v in values) if higher_is_good else max(v for _, v in values)
        ok = worst >= target if higher_is_good else worst <= target
        miss = "" if ok else f", by {abs(worst - target):.3f} in the worst seed"
        lines.append(f"* {name} {'>=' if higher_is_good else '<='} {target}{unit}: {per_seed}. "
                     f"Result: **{'met' if ok else 'missed'}**{miss}.")

    if "fp16" in runs:
        line("FP16's gain in training reward (last w steps minus first w)", sorted(levels.gain.items()),
             REGIME_GAIN, True)
    if "bf16" in runs:
        line("BF16-RN @ x's mean per-step sticking", [(r.seed, float(r.sticking.mean())) for r in runs["bf16"]],
             REGIME_STICKING, True)
        line("BF16-RN @ x's fraction of compute weights changed at the end",
             [(r.seed, float(r.changed[-1])) for r in runs["bf16"]], REGIME_CHANGED, False)
    return lines


def claim_verdicts(runs, rows, levels, tolerances, w, min_gain=MIN_FP16_GAIN):
    """The three claims, judged with the stated rules on the paired per-seed differences. A claim
    reads "reproduced" only when FP16's gain reaches `min_gain` in every seed."""
    if not all(arm in runs for arm in ("fp16", "bf16", "bf16_lr_k", "bf16_sr")):
        return ["Verdicts need the arms fp16, bf16, bf16_lr_k and bf16_sr; this sweep lacks some."]
    if len(runs["fp16"]) < 2:
        return ["No verdicts: paired differences over a single seed have no noise estimate (run at least "
                "2 seeds; the presets --quick and --full run 3 and 5)."]
    gate = None if levels.sufficient(min_gain) else (
        f"**not testable**: {levels.gain_note(min_gain)}: below it no claim can read reproduced")
    speed_tol, kl_tol = tolerances
    auc = lambda r: float(np.mean(r.reward))
    kl_end = lambda r: float(np.mean(r.kl[-w:]))
    kl_matched = lambda r: levels.kl_at(r, 0.5)
    speed_word = {"lower": "slower than", "same": "the same speed as", "higher": "faster than"}
    fp16_gain = speed_tol / REL_TOLERANCE
    out = []

    d1 = paired(runs["bf16"], runs["fp16"], auc)
    c1, m1 = compare(d1, speed_tol), float(np.mean(list(d1.values())))
    if gate:
        v1 = gate
    elif c1 == "lower":
        v1 = "**reproduced**"
    elif compare(d1, 0.0) == "lower":
        v1 = (f"**reproduced in direction, not in size**: BF16-RN is consistently slower, by "
              f"{-m1:.4f} mean reward, {100 * -m1 / fp16_gain:.0f}% of FP16's area gain, below the tolerance")
    elif m1 < 0:
        v1 = "**not reproduced**: same sign as the claim, but within the seed noise"
    else:
        v1 = "**not reproduced**: BF16-RN is not slower"
    ms = lambda arm, k, d=3: format_ms(rows[arm][k], d)
    out.append(f"1. *BF16 round-to-nearest learns more slowly than FP16 at the same LR*: {v1}. Paired "
               f"difference of the mean training reward over the run (BF16-RN @ x minus FP16 @ x): "
               f"{describe_diffs(d1, 4)}. Final greedy eval accuracy: BF16-RN {ms('bf16', 'final_eval')} "
               f"vs FP16 {ms('fp16', 'final_eval')}; compute weights changed since the start at "
               f"the end: BF16-RN {ms('bf16', 'changed_end')} vs FP16 {ms('fp16', 'changed_end')}; mean per-step "
               f"sticking BF16-RN {ms('bf16', 'sticking')} vs FP16 {ms('fp16', 'sticking')}.")

    def kl_claim(n, claim, arm, kl_ref, direction, arm_label, ref_label):
        ds = paired(runs[arm], runs["fp16"], auc)
        dk = paired(runs[arm], runs[kl_ref], kl_end)
        dm = paired(runs[arm], runs[kl_ref], kl_matched)
        cs, ck, cm = compare(ds, speed_tol), compare(dk, kl_tol), compare(dm, kl_tol)
        kl_word = f"{direction} KL than {ref_label}"
        if gate:
            v = gate
        elif cs == "lower":
            v = f"**not reproduced**: {arm_label} is slower than FP16"
        elif ck == direction and cm == direction:
            v = f"**reproduced** ({speed_word[cs]} FP16, {kl_word} at the end and at matched reward)"
        elif ck == direction:
            v = (f"**partly reproduced**: {speed_word[cs]} FP16 with a {kl_word} at the end, but not at "
                 "matched reward (the KL difference comes with a difference in progress)")
        else:
            v = f"**not reproduced**: {speed_word[cs]} FP16, but not a {kl_word}"
        out.append(f"{n}. *{claim}*: {v}. Speed, paired difference of the mean training reward ({arm_label} "
                   f"minus FP16 @ x): {describe_diffs(ds, 4)}. KL at the end, paired difference ({arm_label} "
                   f"minus {ref_label}): {describe_diffs(dk, sci=True)}. KL at matched reward (50% of FP16's "
                   f"gain), paired difference: "
                   f"{describe_diffs(dm, sci=True) if dm else 'n/a (level not reached)'}.")

    kl_claim(2, "BF16 at a higher LR (k*x) matches FP16's speed but ends with a higher KL", "bf16_lr_k",
             "fp16", "higher", "BF16-RN @ k*x", "FP16 @ x")
    kl_claim(3, "BF16 with stochastic rounding matches FP16's speed with a lower KL than (2)", "bf16_sr",
             "bf16_lr_k", "lower", "BF16-SR @ x", "BF16-RN @ k*x")
    return out


def format_ms(values, digits=3, sci=False):
    v = np.array([x for x in values if x is not None], dtype=float)
    if len(v) == 0:
        return "n/a"
    s = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return f"{fmt(float(v.mean()), digits, sci)} ± {fmt(s, digits, sci)}"


def calibrated_k(levels, rn_runs, rn_k_runs, ref_runs, k0, q=0.5):
    """Per seed, the LR multiple k at which BF16-RN would reach q of FP16's gain in FP16's steps.

    The sweep ran BF16-RN at x (steps s1 to the level) and at k0*x (steps sk); a power law
    steps ~ LR^-a through both gives k = k0 ** (ln(s1 / s_fp16) / ln(s1 / sk)). Returns
    {seed: (k or None, note)}: None when a run does not reach the level or when the steps do not
    change between x and k0*x (no power law to solve); the note says which, or whether k was
    interpolated (between 1 and k0) or extrapolated."""
    by_seed = lambda runs: {r.seed: r for r in runs}
    rn, rnk = by_seed(rn_runs), by_seed(rn_k_runs)
    out = {}
    for ref in ref_runs:
        s = ref.seed
        if s not in rn or s not in rnk:
            continue
        f, s1, sk = levels.steps_to(ref, q), levels.steps_to(rn[s], q), levels.steps_to(rnk[s], q)
        missing = [name for name, v in (("FP16", f), ("BF16-RN @ x", s1), (f"BF16-RN @ {k0:g}x", sk)) if v is None]
        if missing:
            out[s] = (None, f"{', '.join(missing)} {'does' if len(missing) == 1 else 'do'} not reach the level")
        elif s1 == sk:
            out[s] = (None, f"same steps ({s1}) at x and {k0:g}x")
        else:
            k = k0 ** (math.log(s1 / f) / math.log(s1 / sk))
            lo, hi = min(1.0, k0), max(1.0, k0)
            out[s] = (k, f"steps {s1} at x, {sk} at {k0:g}x, FP16 {f}; "
                         + ("interpolated" if lo <= k <= hi else "extrapolated"))
    return out


def early_kl(runs, w):
    """Per seed, the run's mean KL to the reference over steps 2..w+1: the first steps, before the
    policy has learned much (step 1 samples from the base itself, so its KL is 0 in every arm)."""
    return {r.seed: float(np.mean(r.kl[1:w + 1])) for r in runs}


def sr_noise(runs, w, ref="fp16", sr_arms=("bf16_sr", "fp16_sr")):
    """Markdown lines on stochastic rounding's own KL (issue 16, item 7): per SR arm, its early KL
    against FP16's, paired per seed (stochastic rounding perturbs the policy at every step)."""
    if ref not in runs:
        return []
    e_ref = early_kl(runs[ref], w)
    out = []
    for sr in [a for a in sr_arms if a in runs]:
        e_sr = early_kl(runs[sr], w)
        d = {s: e_sr[s] - e_ref[s] for s in e_sr if s in e_ref}
        rel = {s: e_sr[s] / e_ref[s] if e_ref[s] > 0 else float("nan") for s in d}
        side = compare(d, 0.0)
        words = {"higher": "higher than", "lower": "lower than", "same": "not clearly different from"}
        verdict = ("its early KL is not judged (one seed)" if side is None else
                   f"its early KL is {words[side]} {ref}'s (|t| > {T_CLEAR} counts as clear)")
        out.append(f"* *{sr}*: early KL minus {ref}'s: {describe_diffs(d, sci=True)}; ratio: "
                   + ", ".join(f"s{s}: {fmt(v, 2)}" for s, v in sorted(rel.items())) + f"; {verdict}.")
    return out


def sr_vs_higher_lr(runs, levels, kl_tol, min_gain=MIN_FP16_GAIN, sr="bf16_sr", rn_k="bf16_lr_k"):
    """The answer to "does BF16-SR pay less KL than BF16-RN @ k*x for the same progress?" at each
    matched-reward level, paired per seed, with the claims' rule (|t| > T_CLEAR and |mean| > kl_tol);
    not testable below the minimum FP16 gain, like the claims (the levels would be noise)."""
    if sr not in runs or rn_k not in runs:
        return []
    if not levels.sufficient(min_gain):
        return [f"* **not testable**: {levels.gain_note(min_gain)}: the matched-reward levels would be noise."]
    out = []
    for q in LEVELS:
        d = paired(runs[sr], runs[rn_k], lambda r, q=q: levels.kl_at(r, q))
        c = compare(d, kl_tol)
        answer = {"lower": "**yes**, lower", "higher": "**no**, higher", "same": "**no clear difference**",
                  None: "**not judged** (fewer than 2 seeds reach the level in both arms)"}[c]
        out.append(f"* At {int(q * 100)}% of FP16's gain: KL of BF16-SR @ x minus BF16-RN @ k*x: "
                   f"{describe_diffs(d, sci=True) if d else 'n/a'}: {answer}.")
    return out
