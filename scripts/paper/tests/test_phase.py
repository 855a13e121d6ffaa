#!/usr/bin/env python3
"""scripts/paper_phase.py (the phase diagram, paper/phase.py) on synthetic sweeps whose lags are known by construction.

Reward curves are linear in the step with seeded noise: at LR 1e-5 BF16-RN learns at half FP16's
speed (area lag 0.5, steps to 50% about 2x) and BF16-SR at FP16's; at 2e-6 every arm learns at FP16's
speed. A second sweep on the same settings adds LR 5e-6 (and a bf16 run at 1e-5 that must not
replace the first sweep's); a third with other steps must be left out. Also checks that
scripts/paper_report.py embeds the phase section when phase.json sits next to its plot folder, and
that every preset of paper/arms.py resolves (arm configs, prompt pool, phase LRs and grids,
CUDA). The grid-scaled analog: a sweep over the grid at one LR (BF16-RN slower the coarser its grid)
is drawn over the grid, labelled as an analog, merged with the real-BF16 runs at that LR, embedded after
the real phase section by paper_report.py; rows varying both the LR and the grid are refused.
Run by ctest (`paper.phase`); exits non-zero on the first failed check.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

SCRIPTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.path.dirname(SCRIPTS)
PHASE = os.path.join(SCRIPTS, "paper_phase.py")
REPORT = os.path.join(SCRIPTS, "paper_report.py")
STEPS = 40


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def write_sweep(folder, arms, seeds, rng, steps=STEPS, preset="paper-phase", base_sha256=None, base=None):
    """arms: {name: (mode, lr, speed[, analog mantissa bits])}; reward = 0.4 + speed * step + seed offset
    + noise. The sweeps share one base policy folder (its model.safetensors); `base_sha256`: the identity
    the sweep recorded at its start (None: the record has none, as older ones); `base`: another base folder."""
    os.makedirs(folder)
    if base is None:  # the shared base (another `base` is named as it is, even where nothing is)
        base = os.path.join(os.path.dirname(folder), "base")
    if base == os.path.join(os.path.dirname(folder), "base") and not os.path.exists(base):
        os.makedirs(base)
        with open(os.path.join(base, "model.safetensors"), "wb") as f:
            f.write(b"the base policy's weights")
    with open(os.path.join(folder, "sweep.json"), "w") as f:
        json.dump(dict({"preset": preset, "steps": steps, "seeds": seeds, "arms": " ".join(arms), "base": base,
                        "compute": "fp32", "pool": {"records": 8}, "overrides": [], "eval_every": 10,
                        "eval_samples": 10, "command": "scripts/paper/tests/test_phase.py", "verdicts": False,
                        "reference": "fp16"}, **({"base_sha256": base_sha256} if base_sha256 else {})), f)
    offsets = rng.normal(0, 0.01, seeds)
    for arm, (mode, lr, speed, *bits) in arms.items():
        for s in range(1, seeds + 1):
            d = os.path.join(folder, arm, f"seed{s}")
            os.makedirs(d)
            with open(os.path.join(d, "config.yaml"), "w") as f:
                grid = f"  analog_mantissa_bits: {bits[0]}\n" if bits else ""
                f.write(f"precision:\n  mode: {mode}\n{grid}optim:\n  lr: {lr}\n")
            with open(os.path.join(d, "metrics.jsonl"), "w") as f:
                for t in range(1, steps + 1):
                    acc = 0.4 + speed * t + offsets[s - 1] + rng.normal(0, 0.001)
                    m = {"step": t, "reward_mean": acc, "accuracy": acc, "kl_ref_exact": 1e-4 * t,
                         "sticking_frac": {"fp16": 0.5, "bf16": 0.95, "bf16_sr": 0.7}[mode],
                         "changed_from_start_frac": 0.5, "step_seconds": 1.0}
                    if t % 10 == 0:
                        m["eval_accuracy"] = acc
                    f.write(json.dumps(m) + "\n")


def check_presets(tmp):
    """Every preset resolves to arms whose configs exist, trains on its pool (the paper presets) and
    sends the phase sweep's LRs to the trainer. Sweep folders in `tmp` (train_args clears a run
    folder that has no checkpoint)."""
    sys.path.insert(0, SCRIPTS)
    os.chdir(ROOT)  # the sweep works from the checkout's root (its main() changes there too)
    import paper.sweep as driver
    from paper.arms import PRESETS
    for name, p in PRESETS.items():
        a = driver.parse_args(["--preset", name, "--no-build", "--out", os.path.join(tmp, name)])
        sweep = driver.Sweep(a, "build/unstuck")
        check(all(os.path.exists(os.path.join(ROOT, arm.config)) for arm in sweep.arms), f"{name}: arm configs exist")
        args = sweep.train_args(sweep.arms[0], 1)
        check(f"data.train_path={sweep.pool}" in args and sweep.pool.endswith(".jsonl"),
              f"{name}: the arms train on the prompt pool ({sweep.pool})")
        if p.get("phase"):
            lrs = sorted({float(o.split("=")[1]) for arm in sweep.arms for o in arm.overrides if o.startswith("optim.lr=")})
            grids = p["phase"].get("bits", [0])
            check(lrs == sorted(p["phase"]["lrs"]) and len(sweep.arms) == 3 * len(lrs) * len(grids),
                  f"{name}: FP16, BF16-RN, BF16-SR at every LR {lrs} and grid {grids}")
            got = sorted({next((int(o.split("=")[1]) for o in arm.overrides
                                if o.startswith("precision.analog_mantissa_bits=")), 0) for arm in sweep.arms})
            check(got == sorted(grids), f"{name}: the arms' analog grids {got}")
        if p.get("device") == "cuda":
            check("run.device=cuda" in args and sweep.compute == "native", f"{name}: CUDA, real formats")
    try:
        driver.Sweep(driver.parse_args(["--preset", "paper-phase", "--arms", "bf16_lr3e-06", "--out",
                                          os.path.join(tmp, "x")]), "build/unstuck")
        check(False, "an unknown phase arm is refused")
    except driver.SweepError as e:
        check("unknown arm" in str(e), f"an unknown phase arm is refused ({e})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_presets(tmp)
        phase = os.path.join(tmp, "phase")
        write_sweep(phase, {"fp16_lr1e-05": ("fp16", 1e-5, 0.004), "bf16_lr1e-05": ("bf16", 1e-5, 0.002),
                            "bf16_sr_lr1e-05": ("bf16_sr", 1e-5, 0.004), "fp16_lr2e-06": ("fp16", 2e-6, 0.004),
                            "bf16_lr2e-06": ("bf16", 2e-6, 0.004), "bf16_sr_lr2e-06": ("bf16_sr", 2e-6, 0.004)},
                    1, np.random.default_rng(1))
        quick = os.path.join(tmp, "quick")
        write_sweep(quick, {"fp16": ("fp16", 5e-6, 0.004), "bf16": ("bf16", 5e-6, 0.003),
                            "bf16_sr": ("bf16_sr", 5e-6, 0.004), "bf16_lr_k": ("bf16", 1e-5, 0.004)},
                    2, np.random.default_rng(2), preset="paper-quick")
        other = os.path.join(tmp, "other")
        write_sweep(other, {"fp16": ("fp16", 2e-5, 0.004), "bf16": ("bf16", 2e-5, 0.004)}, 1,
                    np.random.default_rng(3), steps=STEPS + 10)
        # A sweep of the base as it was before it was trained again in the same folder (its record's identity).
        retrained = os.path.join(tmp, "retrained")
        write_sweep(retrained, {"fp16": ("fp16", 4e-5, 0.004), "bf16": ("bf16", 4e-5, 0.004)}, 1,
                    np.random.default_rng(5), base_sha256="0" * 64)
        # A sweep whose base is gone and whose record does not name its hash: no base to match, left out.
        unidentified = os.path.join(tmp, "unidentified")
        write_sweep(unidentified, {"fp16": ("fp16", 3e-5, 0.004), "bf16": ("bf16", 3e-5, 0.004)}, 1,
                    np.random.default_rng(6), base=os.path.join(tmp, "base-gone"))
        plots = os.path.join(tmp, "docs", "results", "phase")
        results = os.path.join(tmp, "docs", "RESULTS-phase.md")
        r = subprocess.run([sys.executable, PHASE, "--sweeps", phase, quick, other, retrained, unidentified,
                            "--results", results,
                            "--plots", plots], capture_output=True, text=True)
        check(r.returncode == 0, f"paper_phase.py exits 0 ({r.stderr.strip()})")
        check(os.path.exists(os.path.join(plots, "phase_diagram.png")), "phase_diagram.png written")
        p = json.load(open(os.path.join(plots, "phase.json")))
        rows = {row["lr"]: row for row in p["rows"]}
        check(sorted(rows) == [2e-6, 5e-6, 1e-5], f"LRs 2e-6, 5e-6 (from the second sweep), 1e-5; got {sorted(rows)}")
        check(any("left out" in n and "steps" in n for n in p["notes"]), "the sweep with other steps is left out")
        check(any("left out" in n and "base_sha256" in n and "retrained" in n for n in p["notes"]),
              f"the sweep of another base in the same folder is left out ({p['notes']})")
        check(any("left out" in n and "not there to identify" in n for n in p["notes"]),
              f"the sweep whose base cannot be identified is left out ({p['notes']})")
        lag = rows[1e-5]["arms"]["bf16"]["area_lag"]
        check(len(lag) == 1 and abs(lag[0] - 0.5) < 0.1, f"BF16-RN at half speed: area lag 0.5 +- 0.1, got {lag}")
        ratio = rows[1e-5]["arms"]["bf16"]["steps50_ratio"][0]
        check(1.6 < ratio < 2.4, f"BF16-RN at half speed: steps to 50% about 2x FP16's, got {ratio:.2f}")
        check(rows[1e-5]["arms"]["bf16"]["seeds"] == [1], "the first sweep's bf16 run at 1e-5 is kept "
              "(seed 1 only: the second sweep's seed 2 has no FP16 at 1e-5)")
        sr = rows[1e-5]["arms"]["bf16_sr"]["area_lag"][0]
        check(abs(sr) < 0.1, f"BF16-SR at FP16's speed: area lag within 0.1 of 0, got {sr:.3f}")
        check(abs(rows[2e-6]["arms"]["bf16"]["area_lag"][0]) < 0.1, "no lag where BF16-RN learns at FP16's speed")
        mid = rows[5e-6]["arms"]["bf16"]["area_lag"]
        check(len(mid) == 2 and all(0.15 < v < 0.35 for v in mid), f"0.75x speed: area lag 0.25 per seed, got {mid}")
        check(all(row["gain_sufficient"] for row in p["rows"]), "FP16's gain (0.14) counts as sufficient")
        text = open(results).read()
        check(text.count("\n| ") >= 4 and "phase_diagram.png" in text, "markdown table and plot link")
        r = subprocess.run([sys.executable, PHASE, "--data", os.path.join(plots, "phase.json"), "--results", results,
                            "--print"], capture_output=True, text=True)
        check(r.returncode == 0 and r.stdout == text, "the report rendered from phase.json alone is the same bytes")
        # paper_report.py embeds the section when docs/results/phase/phase.json exists.
        with open(os.path.join(quick, "sweep.json")) as f:
            sw = json.load(f)
        sw["verdicts"] = True
        with open(os.path.join(quick, "sweep.json"), "w") as f:
            json.dump(sw, f)
        out = os.path.join(tmp, "docs", "RESULTS.md")
        r = subprocess.run([sys.executable, REPORT, "--sweep", quick, "--results", out, "--plots",
                            os.path.join(tmp, "docs", "results", "quick")], capture_output=True, text=True)
        check(r.returncode == 0, f"paper_report.py exits 0 ({r.stderr.strip()})")
        text = open(out).read()
        check("## Phase diagram" in text and "(results/phase/phase_diagram.png)" in text,
              "RESULTS.md embeds the phase diagram with a link relative to docs/")
        check_analog(tmp, quick)
    print("paper_phase: all checks passed")


def check_analog(tmp, quick):
    """The grid-scaled analog: at LR 5e-6, grids of 6 and 4 mantissa bits where BF16-RN learns at 0.5x and
    0.25x FP16's speed; the quick sweep's 5e-6 runs give the real-BF16 row."""
    analog = os.path.join(tmp, "analog")
    write_sweep(analog, {"fp16_lr5e-06_m6": ("fp16", 5e-6, 0.004, 6), "bf16_lr5e-06_m6": ("bf16", 5e-6, 0.002, 6),
                         "bf16_sr_lr5e-06_m6": ("bf16_sr", 5e-6, 0.004, 6),
                         "fp16_lr5e-06_m4": ("fp16", 5e-6, 0.004, 4), "bf16_lr5e-06_m4": ("bf16", 5e-6, 0.001, 4),
                         "bf16_sr_lr5e-06_m4": ("bf16_sr", 5e-6, 0.004, 4)},
                1, np.random.default_rng(4), preset="paper-phase-analog")
    plots = os.path.join(tmp, "docs", "results", "phase-analog")
    results = os.path.join(tmp, "docs", "RESULTS-phase-analog.md")
    r = subprocess.run([sys.executable, PHASE, "--sweeps", analog, quick, "--results", results, "--plots", plots],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"paper_phase.py on the analog sweep exits 0 ({r.stderr.strip()})")
    p = json.load(open(os.path.join(plots, "phase.json")))
    rows = {row["bits"]: row for row in p["rows"] if row["lr"] == 5e-6}
    check(sorted(rows) == [0, 4, 6] and len(p["rows"]) == 3,
          f"rows: real BF16 (the quick sweep's) and the 6- and 4-bit grids at 5e-6 (the quick sweep's bf16 @ 1e-5 "
          f"has no FP16 to pair with); got "
          f"{[(row['lr'], row['bits']) for row in p['rows']]}")
    lags = [rows[b]["arms"]["bf16"]["area_lag"][0] for b in (0, 6, 4)]
    # (the area above FP16's start, its first-w-steps mean, makes a linear curve's lag a little above 1 - speed)
    check(lags[0] < lags[1] < lags[2] and 0.7 < lags[2] < 0.95,
          f"BF16-RN's lag grows with the grid's coarseness (about 0.25, 0.5, 0.75), got {[round(v, 2) for v in lags]}")
    check(abs(rows[4]["arms"]["bf16_sr"]["area_lag"][0]) < 0.1, "BF16-SR keeps FP16's speed on the 4-bit grid")
    # Rows with FP16 at two LRs and two grids have no single axis: refused.
    mixed = os.path.join(tmp, "mixed")
    write_sweep(mixed, {"fp16_lr1e-05": ("fp16", 1e-5, 0.004), "bf16_lr1e-05": ("bf16", 1e-5, 0.004),
                        "fp16_lr5e-06_m4": ("fp16", 5e-6, 0.004, 4), "bf16_lr5e-06_m4": ("bf16", 5e-6, 0.001, 4)},
                1, np.random.default_rng(5))
    r = subprocess.run([sys.executable, PHASE, "--sweeps", mixed, "--results", results, "--plots", plots],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "both the LR and the grid" in r.stderr,
          f"a sweep varying both the LR and the grid is refused ({r.stderr.strip()})")
    r = subprocess.run([sys.executable, PHASE, "--sweeps", analog, quick, "--results", results, "--plots", plots],
                       capture_output=True, text=True)
    text = open(results).read()
    check("**Not a real format.**" in text and "| 4 bits (8x coarser; analog) |" in text and
          "| BF16 (7 bits) |" in text, "the analog report is labelled and names each grid")
    out = os.path.join(tmp, "docs", "RESULTS.md")
    r = subprocess.run([sys.executable, REPORT, "--sweep", quick, "--results", out, "--plots",
                        os.path.join(tmp, "docs", "results", "quick")], capture_output=True, text=True)
    check(r.returncode == 0, f"paper_report.py exits 0 ({r.stderr.strip()})")
    text = open(out).read()
    real, grid = text.find("## Phase diagram: the lag over"), text.find("## Phase diagram over the rounding grid")
    check(0 <= real < grid and "(results/phase-analog/phase_diagram.png)" in text,
          "RESULTS.md embeds the analog's phase section after the real one")


if __name__ == "__main__":
    main()
