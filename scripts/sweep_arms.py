"""Arms and presets of scripts/compare.py: the paper's arms (configs/paper/<arm>.yaml) and the arms
made from a user's config by overriding precision.mode and optim.lr (MODE or MODE@Kx).

An arm is a config file plus key=value overrides of `unstuck train`; compare.py adds the seed,
steps, cadence and output folder.
"""
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
MODE_LABELS = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16-RN", "bf16_sr": "BF16-SR", "fp16_sr": "FP16-SR"}

# Presets of the paper reproduction: steps, seeds, evaluation and checkpoint cadence. `results_doc`:
# the report goes to docs/RESULTS.md and the plots to docs/results/<name>.
PRESETS = {
    "paper-quick": dict(steps=40, seeds=3, eval_every=10, eval_samples=200, checkpoint_every=5,
                        results_doc="quick"),
    "paper-full": dict(steps=180, seeds=5, eval_every=15, eval_samples=500, checkpoint_every=15,
                       results_doc="full"),
    "paper-smoke": dict(steps=4, seeds=1, eval_every=2, eval_samples=16, checkpoint_every=2, smoke=True),
}


class SweepError(Exception):
    """A user mistake or a failed step; compare.py prints it as one line and exits 2."""


class Arm:
    def __init__(self, name, label, config, overrides):
        self.name, self.label, self.config, self.overrides = name, label, config, list(overrides)


def paper_arms(spec):
    """Arms of configs/paper/ named by `spec` (space- or comma-separated; None: all six)."""
    import os
    names = spec.replace(",", " ").split() if spec else PAPER_ARMS
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
