"""One finished run of a sweep, loaded for the reports: its per-step metrics (metrics.jsonl) as arrays
indexed by step - 1, and what its resolved config.yaml says of LR, precision mode and rounding grid.
to_data() / Run.from_data() turn the part the reports read into JSON and back, exactly (a float's JSON
text reads back as the same float), so a report can be rendered again from committed data.

ReportError is the reports' one error: a missing or unfinished file, named with what to do.
"""
import hashlib
import json
import os

import numpy as np

from .arms import SweepError, analog_bits, yaml_scalar


class ReportError(Exception):
    pass


def base_sha256(sweep):
    """The identity of a sweep record's base policy: the SHA-256 of its model.safetensors (the record's
    "base_sha256", or hashed from the "base" folder when an older record lacks it; None when neither is
    there). The base's path says nothing: a base retrained in the same folder is another policy, and one
    sweep's lags or claims must not be embedded in the report of another base's sweep."""
    if sweep.get("base_sha256"):
        return sweep["base_sha256"]
    path = os.path.join(sweep.get("base") or "", "model.safetensors")
    if not sweep.get("base") or not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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

    # The fields the reports read; to_data() keeps exactly these, so a report rendered from them is the
    # report rendered from the run folder.
    SERIES = ("reward", "kl", "sticking", "changed", "eval_acc")

    def to_data(self):
        d = {"arm": self.arm, "seed": self.seed, "lr": self.lr, "mode": self.mode, "bits": self.bits,
             "seconds": self.seconds, "eval_step": [int(s) for s in self.eval_step]}
        d.update({k: [float(v) for v in getattr(self, k)] for k in self.SERIES})
        return d

    @classmethod
    def from_data(cls, d):
        r = cls.__new__(cls)
        r.arm, r.seed, r.dir = d["arm"], d["seed"], None
        r.lr, r.mode, r.bits, r.seconds = d["lr"], d["mode"], d["bits"], d["seconds"]
        for k in cls.SERIES:
            setattr(r, k, np.array(d[k], dtype=float))
        r.step = np.arange(1, len(r.reward) + 1)
        r.eval_step = np.array(d["eval_step"], dtype=int)
        return r
