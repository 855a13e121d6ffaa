"""One finished run of a sweep, loaded for the reports: its per-step metrics (metrics.jsonl) as arrays
indexed by step - 1, and what its resolved config.yaml says of LR, precision mode and rounding grid.

ReportError is the reports' one error: a missing or unfinished file, named with what to do.
"""
import json
import os

import numpy as np

from .arms import SweepError, analog_bits, yaml_scalar


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
    try:
        return yaml_scalar(open(path).read(), section, key)
    except SweepError as e:
        raise ReportError(f"{path}: {e}")


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
        with open(cfg) as f:
            self.bits = analog_bits(f.read())
        self.seconds = float(col("step_seconds").sum())
