"""Arms and presets of scripts/compare.py: the paper's arms (configs/paper/<arm>.yaml) and the arms
made from a user's config by overriding precision.mode and optim.lr (MODE or MODE@Kx), and the reading
of a run's resolved config (yaml_scalar, analog_bits, grid_name) that the reports share.

An arm is a config file plus key=value overrides of `unstuck train`; the sweep (paper/sweep.py) adds
the seed, steps, cadence and output folder. The bottom layer of the package: imports none of it.
"""
import os
import subprocess

PAPER_ARMS = ["fp32", "fp16", "bf16", "bf16_lr_k", "bf16_sr", "fp16_sr"]
PAPER_LABELS = {
    "fp32": "FP32 (control)",
    "fp16": "FP16 @ x",
    "bf16": "BF16-RN @ x",
    "bf16_lr_k": "BF16-RN @ k*x",
    "bf16_sr": "BF16-SR @ x",
    "fp16_sr": "FP16-SR @ x",
}
MODE_LABELS = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16-RN", "bf16_sr": "BF16-SR", "fp16_sr": "FP16-SR",
               "fp8_rn": "FP8-RN", "fp8_sr": "FP8-SR"}
FP8_MODES = ("fp8_rn", "fp8_sr")  # E4M3 weights with per-channel scales (docs/PRECISION.md)

# Presets of the paper reproduction: arms, steps, seeds, evaluation and checkpoint cadence, and the
# prompt pool built from the base (scripts/paper_pool.py: `records` first training prompts sampled `k`
# times, kept when solved between `lo` and `hi` of the time; with `size`, the sweep trains on the first
# `size` prompts of that pool, which then recur every few steps). `results_doc`: the report goes to
# docs/RESULTS.md (docs/RESULTS-<name>.md for the others) and the plots to docs/results/<name>.
# `phase`: the LR sweep of the phase diagram (modes x LRs, arms named MODE_lrLR; report by
# scripts/paper_phase.py). `lr`: the LR x of every arm (default configs/paper/bf16.yaml's); `k`: the LR
# multiple of the bf16_lr_k arm (default configs/paper/bf16_lr_k.yaml's; --k overrides it). `drift`: run
# scripts/paper_drift.py after the sweep (`probe_samples`: test records of its retained-gain probe; default
# the sweep's eval_samples; 0: no probe). The budgets follow the step times of the committed reports
# (`s/step` in docs/RESULTS*.md).
QUICK_ARMS = ["fp16", "bf16", "bf16_lr_k", "bf16_sr"]  # the four arms the claims need
# SFT overrides of configs/sft/countdown.yaml for the larger bases (the default: dim 128, 4 layers, 0.86M).
WIDE_SFT = ["model.dim=192", "model.n_layers=6", "model.n_heads=6", "model.n_kv_heads=6", "model.ffn_dim=576"]
# The 27M GPU base: half the small base's LR (2e-3), as wider models want, with a longer warm-up.
GPU_SFT = ["run.device=cuda", "model.dim=512", "model.n_layers=8", "model.n_heads=8", "model.n_kv_heads=8",
           "model.ffn_dim=1536", "sft.steps=3000", "sft.batch_size=128", "optim.lr=1e-3", "sft.warmup_steps=100"]
PRESETS = {
    "paper-quick": dict(steps=200, seeds=3, arms=QUICK_ARMS, eval_every=50, eval_samples=200,
                        checkpoint_every=20, pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=True,
                        probe_samples=2000, results_doc="quick"),
    # --full: the small base and a wider, deeper one (2.9M parameters; two model sizes), each 5 seeds;
    # reproduce.sh --full runs both, 200 steps as --quick (docs/RESULTS-full*.md give the sweeps' wall times).
    "paper-full": dict(steps=200, seeds=5, arms=QUICK_ARMS, eval_every=50, eval_samples=500,
                       checkpoint_every=20, pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=True,
                       probe_samples=2000, results_doc="full"),
    "paper-full-wide": dict(steps=200, seeds=5, arms=QUICK_ARMS, eval_every=50, eval_samples=500,
                            checkpoint_every=20, pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=True,
                            probe_samples=2000, results_doc="full-wide", base_name="sft-countdown-wide",
                            sft=WIDE_SFT),
    "paper-phase": dict(steps=200, seeds=1, phase=dict(modes=["fp16", "bf16", "bf16_sr"],
                                                       lrs=[2e-6, 5e-6, 1e-5, 2e-5]),
                        eval_every=50, eval_samples=200, checkpoint_every=50,
                        pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=False, results_doc="phase"),
    # --phase-analog: the phase diagram over the grid instead of the LR (issue 16, item 5): FP16, BF16-RN and
    # BF16-SR at x = 5e-6 on the grid-scaled analog, BF16 with 6, 5 and 4 mantissa bits (a 2x, 4x, 8x coarser
    # grid: the same drift is that many times fewer half-ulps), every arm from the base rounded onto its
    # grid; the real-BF16 row (7 bits) comes from the quick sweep's runs at x. Not a real format: labelled so.
    "paper-phase-analog": dict(steps=200, seeds=1, phase=dict(modes=["fp16", "bf16", "bf16_sr"], lrs=[5e-6],
                                                              bits=[6, 5, 4]),
                               eval_every=50, eval_samples=200, checkpoint_every=50,
                               pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=False, results_doc="phase-analog"),
    # --quick-analog: --quick's arms and seeds on the 5-bit analog grid (4x coarser than BF16's): the claims'
    # verdicts where the phase diagram's lag is the paper's size. Not a real format: the report says so.
    # `k`: BF16-RN @ k*x at k = 1.7, the k calibrated on this preset's run at k = 2 (docs/CALIBRATION.md, "The
    # grid-scaled analog"), instead of the arm's 2.
    # The drift is measured in half-ulps of the analog grid (Q on that grid), without the retained-gain probe:
    # FP16's greedy test accuracy does not move measurably in these runs, so the probe would divide noise.
    "paper-quick-analog": dict(steps=200, seeds=3, arms=QUICK_ARMS, k=1.7, eval_every=50, eval_samples=200,
                               checkpoint_every=20, pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=True,
                               probe_samples=0, results_doc="quick-analog",
                               train=["precision.analog_mantissa_bits=5"]),
    # --quick-analog-pool: the analog where FP16's gain also reaches the 0.3 target: the first 64 prompts of the
    # pool (they recur every other step, so the gradient is a cleaner signal per unit of drift), x = 2e-5 (`lr`,
    # for every arm) and a 3-bit grid (16x coarser than BF16's: 4x the LR against a 4x coarser grid than
    # --quick-analog's), k = 1.7 calibrated on one seed at k = 2 (docs/CALIBRATION.md). Not a real format.
    "paper-quick-analog-pool": dict(steps=200, seeds=3, arms=QUICK_ARMS, lr=2e-5, k=1.7, eval_every=50,
                                    eval_samples=200, checkpoint_every=20, probe_samples=0,
                                    pool=dict(records=2000, k=8, lo=0.2, hi=0.8, size=64), drift=True,
                                    results_doc="quick-analog-pool", train=["precision.analog_mantissa_bits=3"]),
    # --gpu: a 27M-parameter policy (dim 512, 8 layers) SFT-trained and swept on one CUDA device, every
    # arm computing in its own format (real formats only); refused without a usable CUDA device.
    "paper-gpu": dict(steps=100, seeds=3, arms=QUICK_ARMS, eval_every=25, eval_samples=500, checkpoint_every=10,
                      pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=True, results_doc="gpu",
                      base_name="sft-countdown-gpu", sft=GPU_SFT, device="cuda", compute="native", jobs=4),
    # --gpu-phase: the phase diagram of the --gpu policy (same base and pool): FP16, BF16-RN, BF16-SR
    # at higher LRs than --gpu's x = 5e-6 (whose runs, and bf16 @ 2x = 1e-5, it merges), where FP16's
    # gain should clear the verdicts' minimum; for the next GPU lease, after --gpu on the same machine.
    "paper-gpu-phase": dict(steps=100, seeds=1, phase=dict(modes=["fp16", "bf16", "bf16_sr"], lrs=[1e-5, 2e-5, 4e-5]),
                            eval_every=25, eval_samples=500, checkpoint_every=50,
                            pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=False, results_doc="gpu-phase",
                            base_name="sft-countdown-gpu", sft=GPU_SFT, device="cuda", compute="native", jobs=4),
    # --gpu-pool: --gpu on the first 64 prompts of its pool (same base), 200 steps: on the CPU policy a
    # 32-64-prompt pool raised FP16's gain at the same LR (docs/CALIBRATION.md, "Smaller prompt pools";
    # its data was not kept); the 27M policy's lag at x came with a gain below the verdicts' minimum.
    "paper-gpu-pool": dict(steps=200, seeds=3, arms=QUICK_ARMS, eval_every=50, eval_samples=500, checkpoint_every=20,
                           pool=dict(records=2000, k=8, lo=0.2, hi=0.8, size=64), drift=True, results_doc="gpu-pool",
                           base_name="sft-countdown-gpu", sft=GPU_SFT, device="cuda", compute="native", jobs=4),
    # --quick-fp8: --quick's arms, seeds, LR and rules with the BF16 arms in FP8 E4M3 (per-channel scales,
    # docs/PRECISION.md): FP16 @ x, FP8-RN @ x, FP8-RN @ k*x, FP8-SR @ x (`arm_modes`: each arm's
    # precision.mode), every arm from the base rounded to nearest on the FP8 grid (grpo.round_base_to_fp8), so
    # FP16 and FP8 start from the same weights. A real format, where the sticking is far stronger than BF16's.
    # The drift analysis measures half-ulps of fp8_rn's grid (per-channel E4M3, BF16 outside the matrices).
    "paper-quick-fp8": dict(steps=200, seeds=3, arms=QUICK_ARMS, eval_every=50, eval_samples=200,
                            checkpoint_every=20, pool=dict(records=2000, k=8, lo=0.2, hi=0.8), drift=True,
                            results_doc="fp8", train=["grpo.round_base_to_bf16=false", "grpo.round_base_to_fp8=true"],
                            arm_modes={"bf16": "fp8_rn", "bf16_lr_k": "fp8_rn", "bf16_sr": "fp8_sr"}),
    "paper-smoke": dict(steps=4, seeds=1, arms=PAPER_ARMS, eval_every=2, eval_samples=16, checkpoint_every=2,
                        pool=dict(records=24, k=2, lo=0.0, hi=1.0, size=16), drift=True, smoke=True,
                        # the smoke base solves nothing: a 0/1 reward would give it no gradient at all
                        train=["reward.format_reward=0.1"]),
}


class SweepError(Exception):
    """A user mistake or a failed step; compare.py prints it as one line and exits 2."""


class Arm:
    def __init__(self, name, label, config, overrides):
        self.name, self.label, self.config, self.overrides = name, label, config, list(overrides)


def published(preset, suffix=""):
    """Where a preset's report and plots are committed: (docs/RESULTS[-<results_doc>]<suffix>.md,
    docs/results/<results_doc><suffix>), or (None, None) for a preset that publishes none. `suffix`:
    "-native" for a sweep run with precision.compute native against an fp32 preset."""
    public = PRESETS[preset].get("results_doc")
    if public is None:
        return None, None
    doc = "" if public == "quick" else "-" + public
    return f"docs/RESULTS{doc}{suffix}.md", f"docs/results/{public}{suffix}"


def paper_arms(spec, default=PAPER_ARMS):
    """Arms of configs/paper/ named by `spec` (space- or comma-separated; None: `default`)."""
    names = spec.replace(",", " ").split() if spec else default
    arms = []
    for n in names:
        path = f"configs/paper/{n}.yaml"
        if not os.path.exists(path):
            known = " ".join(sorted(f[:-5] for f in os.listdir("configs/paper") if f.endswith(".yaml")))
            raise SweepError(f"unknown arm '{n}': no {path} (arms: {known})")
        arms.append(Arm(n, PAPER_LABELS.get(n, n), path, []))
    if len({arm.name for arm in arms}) != len(arms):
        raise SweepError(f"--arms names an arm twice: {spec}")
    return arms


def phase_arms(modes, lrs, spec=None, bits=(0,)):
    """Arms of the phase diagram: configs/paper/<mode>.yaml at each LR, named MODE_lrLR (e.g. bf16_lr2e-06),
    and on each grid of `bits` (precision.analog_mantissa_bits; 0 = the real formats), named MODE_lrLR_mB
    for the grid-scaled analog (e.g. bf16_lr5e-06_m4)."""
    arms = [Arm(f"{m}_lr{lr:g}" + (f"_m{b}" if b else ""),
                f"{MODE_LABELS[m]} @ {lr:g}" + (f", {b}-bit analog grid" if b else ""), f"configs/paper/{m}.yaml",
                [f"optim.lr={lr:g}"] + ([f"precision.analog_mantissa_bits={b}"] if b else []))
            for lr in lrs for b in bits for m in modes]
    if spec:  # --arms picks among them
        names = spec.replace(",", " ").split()
        unknown = [n for n in names if n not in {arm.name for arm in arms}]
        if unknown:
            raise SweepError(f"unknown arm(s) {' '.join(unknown)} of the phase sweep (arms: "
                             f"{' '.join(arm.name for arm in arms)})")
        arms = [arm for arm in arms if arm.name in names]
    return arms


def mode_arms(spec, config, lr):
    """Arms from --modes: MODE (at the config's LR) or MODE@Kx (at K times it), e.g. bf16@2x."""
    arms = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        mode, _, mult = item.partition("@")
        if mode not in MODE_LABELS:
            raise SweepError(f"--modes: unknown precision mode '{mode}' in '{item}' (modes: "
                             f"{', '.join(MODE_LABELS)})")
        k = 1.0
        if mult:
            try:
                k = float(mult[:-1]) if mult.endswith("x") else float("nan")
            except ValueError:
                k = float("nan")
            if not k > 0:
                raise SweepError(f"--modes: '{item}': the LR multiplier must read like 2x or 0.5x, got '{mult}'")
        name = mode if k == 1.0 else f"{mode}_lr{k:g}x"
        label = f"{MODE_LABELS[mode]} @ " + ("x" if k == 1.0 else f"{k:g}x")
        arms.append(Arm(name, label, config, [f"precision.mode={mode}", f"optim.lr={k * lr:.6g}"]))
    if not arms:
        raise SweepError("--modes names no arm")
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise SweepError(f"--modes names an arm twice: {spec}")
    return arms


def resolved_config(unstuck, config, overrides):
    """The validated, resolved YAML of `config` with `overrides` (`unstuck config show`)."""
    r = subprocess.run([unstuck, "config", "show", config, "--no-docs"] + list(overrides),
                       capture_output=True, text=True)
    if r.returncode != 0:
        msg = r.stderr.strip()
        raise SweepError(msg[len("error: "):] if msg.startswith("error: ") else msg)
    return r.stdout


def yaml_scalar(text, section, key):
    """The value of `section.key` in a resolved two-level YAML (the trainer's config.yaml)."""
    current = None
    for line in text.splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped:
            continue
        if not line.startswith(" ") and stripped.endswith(":"):
            current = stripped[:-1]
        elif current == section and stripped.strip().startswith(key + ":"):
            return stripped.split(":", 1)[1].strip().strip('"')
    raise SweepError(f"resolved config has no {section}.{key}")


def analog_bits(config_text):
    """precision.analog_mantissa_bits of a run's resolved config (0: the real formats; configs written
    before the key have none)."""
    try:
        return int(yaml_scalar(config_text, "precision", "analog_mantissa_bits"))
    except SweepError:
        return 0


def grid_name(bits):
    """How reports name a run's rounding grid: BF16, or the analog's."""
    return "BF16" if bits == 0 else f"{bits}-bit analog"
