"""The measures of the paper report (paper/report.py), pure functions of the runs (objects with .seed,
.reward, .kl arrays indexed by step - 1, as paper/runs.py loads them): paired per-seed differences and
their t, FP16's gain and the steps to 25/50/75% of it, KL at matched reward, the relative area lag, the
calibrated k and the early KL; and how the reports write these numbers (fmt, describe_diffs, format_ms).
No rule lives here: the verdicts on them are paper/verdicts.py.
"""
import math

import numpy as np

LEVELS = (0.25, 0.5, 0.75)       # fractions of FP16's gain: the matched-reward levels


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


def format_ms(values, digits=3, sci=False):
    v = np.array([x for x in values if x is not None], dtype=float)
    if len(v) == 0:
        return "n/a"
    s = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return f"{fmt(float(v.mean()), digits, sci)} ± {fmt(s, digits, sci)}"


def steps_text(x, steps):
    return f"> {steps}" if x is None else str(x)


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

    def sufficient(self, min_gain):
        """Whether FP16's gain reaches `min_gain` in every seed (the verdicts' gate, MIN_FP16_GAIN)."""
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


def early_kl(runs, w):
    """Per seed, the run's mean KL to the reference over steps 2..w+1: the first steps, before the
    policy has learned much (step 1 samples from the base itself, so its KL is 0 in every arm)."""
    return {r.seed: float(np.mean(r.kl[1:w + 1])) for r in runs}


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
