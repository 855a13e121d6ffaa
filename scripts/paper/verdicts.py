"""The rules of the paper report (paper/report.py): the verdicts on the three claims of arXiv
2611.13545, the size targets and the regime targets of issue 16, judged on the measures of
paper/measures.py. Every rule is also written into the report next to its result, by the text
functions here.
"""
import numpy as np

from .measures import LEVELS, describe_diffs, early_kl, fmt, format_ms, paired, steps_text, t_stat

# No claim can read "reproduced" and no target can be met unless FP16's training reward rose by at
# least this much (absolute, mean reward) in every seed: the tolerances scale with FP16's gain, so a
# vanishing gain would otherwise let noise-sized differences through.
MIN_FP16_GAIN = 0.05
RN_SLOWDOWN_TARGET = 1.3         # BF16-RN needs >= this x FP16's steps to 50% of the gain, every seed
SR_WITHIN = 0.10                 # BF16-SR's steps to 50% within this fraction of FP16's, every seed
T_CLEAR = 2.0                    # |t| above this counts as "clearly nonzero"
REL_TOLERANCE = 0.10             # claims: a difference must exceed 10% of FP16's gain (or KL)


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
