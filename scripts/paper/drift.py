"""How far FP16's weights drift in BF16 half-ulps, and how much of FP16's gain survives BF16 rounding.

On a sweep of the grid-scaled analog (precision.analog_mantissa_bits = m in 1-6), every "BF16" below
is BF16 with m mantissa bits, the grid its BF16 arms round to: half-ulps of that grid, rounding onto it.
On a sweep with FP8 arms (precision.mode fp8_rn / fp8_sr), it is fp8_rn's grid: E4M3 with a
power-of-two scale per output channel on the layers' matrices, BF16 on the rest (Fp8Grid).

For each seed of a sweep (scripts/compare.py), from the reference arm's (FP16's) checkpoints at the
steps where its training reward reaches 50% and 100% of its gain (the nearest kept checkpoint):
  * drift: |w_t - w_0| / (half a BF16 ulp of w_0) per weight, where w_0 is the base policy as the
    runs start (BF16-rounded when grpo.round_base_to_bf16) and w_t the FP32 master at step t.
    Round-to-nearest keeps a BF16 compute weight at w_0 while its drift is below 1.
  * retained-gain probe: greedy eval accuracy (`unstuck eval`, FP32 compute) of the base, of the
    FP16 compute weights at step t, and of the same master rounded to nearest BF16; the retained
    gain is (BF16-rounded - base) / (FP16 - base).
Both also at the last step, and the median drift at every kept checkpoint (drift_vs_step.png).
Writes <sweep>/drift.json (read by the report, paper/report.py), the model directories it evaluated
under <sweep>/drift/, and the plots drift_histogram.png, drift_vs_step.png and retained_gain.png.

    .venv/bin/python scripts/paper_drift.py --sweep runs/paper-quick --plots docs/results/quick
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

from .arms import FP8_MODES, SweepError, analog_bits, grid_name, yaml_scalar
from .measures import GainLevels

PARAM_ALIGN = 128  # kParamAlign of include/unstuck/model/param_layout.h: tensors start on multiples
LAYER_PARTS = ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
               "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
               "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
LEVELS = (0.5, 1.0)
BINS = np.logspace(-3, 3, 61)  # drift histogram bins, in BF16 half-ulps


class DriftError(Exception):
    pass


def layout(names, n_layers):
    """Tensor names in the order of the flat master (llama_layout in src/model/param_layout.cpp)."""
    order = ["model.embed_tokens.weight"]
    for i in range(n_layers):
        order += [f"model.layers.{i}.{p}" for p in LAYER_PARTS]
    order.append("model.norm.weight")
    if "lm_head.weight" in names:
        order.append("lm_head.weight")
    extra = sorted(set(names) - set(order))
    missing = [n for n in order if n not in names]
    if extra or missing:
        raise DriftError(f"the base policy's tensors do not match the Llama layout (extra: {extra}, missing: {missing})")
    return order


def to_bf16(x):
    """Round-to-nearest-even FP32 -> BF16, returned as FP32 values."""
    import torch
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).to(torch.float32).numpy()


def to_grid(x, bits):
    """Round-to-nearest-even FP32 -> the grid of `bits` mantissa bits (0: BF16 itself, 7 bits), as FP32
    values: bf16_coarse_rn of include/unstuck/precision/round_math.h on finite values (the drop of the
    23 - bits low bits of the FP32 pattern, rounded half to even; a carry into the exponent is the next
    binade's first point)."""
    if bits == 0:
        return to_bf16(x)
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    d = 23 - bits
    lsb = (u >> np.uint64(d)) & np.uint64(1)
    r = (u + np.uint64((1 << (d - 1)) - 1) + lsb) & ~np.uint64((1 << d) - 1)
    return r.astype(np.uint32).view(np.float32)


def half_ulp(w, bits=0):
    """Half the grid's spacing at |w| with m = bits mantissa bits (BF16: 7): 2^(E - m - 1) for |w| in
    [2^E, 2^(E+1))."""
    _, e = np.frexp(np.abs(w))  # |w| = f * 2^e, f in [0.5, 1): E = e - 1
    return np.ldexp(np.ones_like(w, dtype=np.float64), e - (bits or 7) - 2)


class Grid:
    """BF16's grid (bits 0) or the analog's: rounding to nearest onto it, and its half-ulp at w."""
    fp8 = False

    def __init__(self, bits=0):
        self.bits = bits
        self.name = grid_name(bits)
        self.tag = f"m{bits}rn" if bits else "bf16rn"  # model directories of the probe

    def round(self, packed):
        return to_grid(packed, self.bits)

    def half_ulp(self, packed):
        return half_ulp(packed, self.bits)


def fp8_exponents(amax):
    """fp8_scale_exponent of include/unstuck/precision/fp8.h per channel: the smallest integer e with
    amax <= 448 x 2^e (amax = f x 2^k, f in [0.5, 1): k - 9 when f <= 0.875, else k - 8); 0 for an all-zero
    channel."""
    f, k = np.frexp(np.asarray(amax, dtype=np.float64))
    return np.where(amax == 0, 0, np.where(f <= 0.875, k - 9, k - 8)).astype(np.int64)


def to_fp8(x, e):
    """Round-to-nearest-even onto E4M3FN times 2^e per element (e broadcast against x), as FP32 values:
    fp8_e4m3_scaled of include/unstuck/precision/fp8.h without SR. q = |x| / 2^e is exact; normal range
    (q >= 2^-6): 3 mantissa bits (to_grid); subnormals: multiples of 2^-9, ties to even; saturation at
    448 (unreached when e is the channel's exponent). The product with 2^e is exact in BF16 above its
    normal range (the BF16 rounding after it changes nothing there)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    q = np.ldexp(np.abs(x).astype(np.float64), -e)
    normal = to_grid(np.maximum(q, 2.0 ** -6).astype(np.float32), 3).astype(np.float64)
    sub = np.rint(q * 512.0) / 512.0  # rint: half to even
    r = np.minimum(np.where(q >= 2.0 ** -6, normal, sub), 448.0)
    return to_bf16((np.sign(x) * np.ldexp(r, e)).astype(np.float32))


class Fp8Grid:
    """fp8_rn's compute grid (docs/PRECISION.md, the FP8 contract) on the packed weights of a base: the
    2-D tensors of the layers (ParamLayout::fp8_matrices) are E4M3 with a scale 2^e per row (output
    channel), e from the row's largest |w| at that step; the embedding, norms and head are BF16. The
    half-ulp at w_0 is the grid's at w_0 with w_0's own scales: 2^(E - 4) x 2^e for q = |w| / 2^e in
    [2^E, 2^(E+1)) of E4M3's normal range, 2^-10 x 2^e below it (its subnormal step 2^-9)."""
    fp8 = True
    name = "FP8 E4M3"
    tag = "fp8rn"

    def __init__(self, base):
        self.segments = []  # (start, rows, cols, is_fp8) of each tensor in the packed order
        o = 0
        for n in base.order:
            shape = base.shapes[n]
            size = int(np.prod(shape))
            matrix = len(shape) == 2 and n.startswith("model.layers.")
            self.segments.append((o, shape[0] if matrix else 1, size // shape[0] if matrix else size, matrix))
            o += size

    def fp8_mask(self, size):
        mask = np.zeros(size, dtype=bool)
        for start, rows, cols, matrix in self.segments:
            mask[start:start + rows * cols] = matrix
        return mask

    def _map(self, packed, fp8, bf16):
        out = np.empty(packed.shape, dtype=np.float64)
        for start, rows, cols, matrix in self.segments:
            part = packed[start:start + rows * cols]
            if matrix:
                m = part.reshape(rows, cols)
                e = fp8_exponents(np.abs(m).max(axis=1).astype(np.float32))[:, None]
                out[start:start + rows * cols] = fp8(m, e).ravel()
            else:
                out[start:start + rows * cols] = bf16(part)
        return out

    def round(self, packed):
        return self._map(packed, to_fp8, to_bf16).astype(np.float32)

    def half_ulp(self, packed):
        def fp8_half(m, e):
            q = np.ldexp(np.abs(m).astype(np.float64), -e)
            return np.ldexp(np.where(q >= 2.0 ** -6, half_ulp(q, 3), 2.0 ** -10), e)
        return self._map(packed, fp8_half, lambda p: half_ulp(p, 0))


def sweep_grid(sweep, bits):
    """The grid of a sweep's round-to-nearest arms: fp8_rn's when an arm runs an FP8 mode (sweep.json's
    arm_overrides), else BF16's or the analog's of `bits`. Returns "fp8" or the bits."""
    overrides = [o for arm in sweep.get("arm_overrides", {}).values() for o in arm]
    return "fp8" if any(o == f"precision.mode={m}" for o in overrides for m in FP8_MODES) else bits


class Base:
    """The base policy as the runs start: named tensors, the flat layout and w_0."""

    def __init__(self, model_dir, start, grid_of=Grid):
        """`start`: the key that rounds the base before step 1: "fp8" (grpo.round_base_to_fp8: fp8_rn's grid),
        "bf16" (grpo.round_base_to_bf16: BF16, or the analog's grid on an analog sweep) or None."""
        from safetensors.numpy import load_file
        import torch
        self.dir = model_dir
        path = os.path.join(model_dir, "model.safetensors")
        if not os.path.exists(path):
            raise DriftError(f"{path} not found")
        try:
            tensors = load_file(path)
        except TypeError:  # BF16 tensors: numpy has no bfloat16
            from safetensors.torch import load_file as load_torch
            tensors = {k: v.to(torch.float32).numpy() for k, v in load_torch(path).items()}
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.order = layout(tensors, int(cfg["num_hidden_layers"]))
        self.shapes = {n: tensors[n].shape for n in self.order}
        self.offsets, total = {}, 0
        for n in self.order:
            self.offsets[n] = total
            size = int(np.prod(self.shapes[n]))
            total += (size + PARAM_ALIGN - 1) // PARAM_ALIGN * PARAM_ALIGN
        self.total = total
        self.grid = grid_of(self)
        w0 = np.concatenate([tensors[n].astype(np.float32).ravel() for n in self.order])
        if start == "fp8":
            w0 = (self.grid if self.grid.fp8 else Fp8Grid(self)).round(w0)
        elif start == "bf16":
            w0 = to_bf16(w0) if self.grid.fp8 else self.grid.round(w0)
        self.w0 = w0.astype(np.float64)  # packed: no gaps

    def flat_to_packed(self, master):
        """The model's elements of a flat master (the alignment gaps dropped), in layout order."""
        if master.size != self.total:
            raise DriftError(f"checkpoint master has {master.size} elements, the base's layout {self.total}")
        parts, gaps = [], []
        for n in self.order:
            o, size = self.offsets[n], int(np.prod(self.shapes[n]))
            parts.append(master[o:o + size])
            gaps.append(master[o + size:o + (size + PARAM_ALIGN - 1) // PARAM_ALIGN * PARAM_ALIGN])
        gap = np.concatenate(gaps)
        if gap.size and np.any(gap != 0):
            raise DriftError("checkpoint master has nonzero values between tensors: not this base's layout")
        return np.concatenate(parts)

    def write_model(self, folder, packed):
        """A model directory for `unstuck eval`: the base's files with these FP32 weights."""
        from safetensors.numpy import save_file
        os.makedirs(folder, exist_ok=True)
        for f in os.listdir(self.dir):
            src = os.path.join(self.dir, f)
            if f != "model.safetensors" and os.path.isfile(src):
                shutil.copy(src, os.path.join(folder, f))
        tensors, o = {}, 0
        for n in self.order:
            size = int(np.prod(self.shapes[n]))
            tensors[n] = np.ascontiguousarray(packed[o:o + size].reshape(self.shapes[n]), dtype=np.float32)
            o += size
        save_file(tensors, os.path.join(folder, "model.safetensors"))


def load_master(ckpt_dir):
    from safetensors.numpy import load_file
    return load_file(os.path.join(ckpt_dir, "state.safetensors"))["master"].astype(np.float32)


def checkpoints(run_dir):
    root = os.path.join(run_dir, "checkpoints")
    out = {}
    for c in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if c.startswith("step_") and not c.endswith(".tmp") and os.path.exists(os.path.join(root, c, "manifest.json")):
            out[int(c[5:])] = os.path.join(root, c)
    return out


def evaluate(unstuck, model_dir, samples, cache):
    """Greedy accuracy of a model directory (FP32 compute), cached in `cache` by directory and samples."""
    key = f"{model_dir} samples={samples}"
    if key in cache:
        return cache[key]
    r = subprocess.run([unstuck, "eval", "--model", model_dir, "--samples", str(samples), "--dtype", "fp32",
                        "--json", "precision.threads=1"], capture_output=True, text=True)
    if r.returncode != 0:
        raise DriftError(f"unstuck eval --model {model_dir} failed: {r.stderr.strip()}")
    cache[key] = float(json.loads(r.stdout)["greedy_accuracy"])
    return cache[key]


def analyse(a):
    sweep = json.load(open(os.path.join(a.sweep, "sweep.json")))
    ref = a.arm or sweep.get("reference", "fp16")
    steps, seeds = int(sweep["steps"]), int(sweep["seeds"])
    w = max(3, steps // 10)  # the report's window
    run1 = os.path.join(a.sweep, ref, "seed1")
    cfg = open(os.path.join(run1, "config.yaml")).read()
    kind = sweep_grid(sweep, analog_bits(cfg))
    def key(name):  # configs written before a key have none: false
        try:
            return yaml_scalar(cfg, "grpo", name) == "true"
        except SweepError:
            return False
    start = "fp8" if key("round_base_to_fp8") else "bf16" if key("round_base_to_bf16") else None  # the trainer's order
    base = Base(yaml_scalar(cfg, "grpo", "base_model"), start, Fp8Grid if kind == "fp8" else lambda _: Grid(kind))
    grid = base.grid
    lr = float(yaml_scalar(cfg, "optim", "lr"))
    samples = a.eval_samples or int(sweep["eval_samples"])
    packed_w0 = base.w0  # (model elements,) in layout order, no alignment gaps
    nonzero = packed_w0 != 0
    half = grid.half_ulp(packed_w0)[nonzero]
    fp8_part = grid.fp8_mask(packed_w0.size)[nonzero] if grid.fp8 else None  # the FP8 matrices' weights
    cache_path = os.path.join(a.sweep, "drift", "evals.json")
    os.makedirs(os.path.dirname(cache_path), exist_ok=True)
    cache = json.load(open(cache_path)) if os.path.exists(cache_path) else {}
    base_dir = os.path.join(a.sweep, "drift", "base")
    if not a.no_probe and not os.path.exists(os.path.join(base_dir, "model.safetensors")):
        base.write_model(base_dir, packed_w0)
    rows, hists, series = [], [], []
    for s in range(1, seeds + 1):
        run_dir = os.path.join(a.sweep, ref, f"seed{s}")
        metrics = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()][:steps]

        class R:  # the fields GainLevels reads
            seed, reward = s, np.array([m["reward_mean"] for m in metrics], dtype=float)
            kl = np.array([m["kl_ref_exact"] for m in metrics], dtype=float)
        levels = GainLevels([R], w)
        ckpts = checkpoints(run_dir)
        if not ckpts:
            raise DriftError(f"{run_dir} has no checkpoints (the reference arm keeps all of them in sweeps by "
                             "scripts/compare.py)")
        targets = []
        if levels.gain[s] > 0:
            for q in LEVELS:
                step = levels.steps_to(R, q)
                if step is not None:
                    targets.append((f"{int(q * 100)}%", q, step))
        if not targets:  # no gain to size: the end of the run, labelled so
            targets.append(("end (no gain)", None, steps))
        elif max(ckpts) not in {min(ckpts, key=lambda c: (abs(c - t[2]), c)) for t in targets}:
            targets.append(("end", None, steps))  # the whole run's drift, robust to a noisy crossing
        for ck in sorted(ckpts):  # median drift at every kept checkpoint: Q as the run goes
            ratio = np.abs(base.flat_to_packed(load_master(ckpts[ck])).astype(np.float64) - packed_w0)[nonzero] / half
            series.append({"seed": s, "step": ck, "median": float(np.median(ratio)),
                           "below_one": float(np.mean(ratio < 1.0))})
        for label, q, step in targets:
            ck = min(ckpts, key=lambda c: (abs(c - step), c))
            master = base.flat_to_packed(load_master(ckpts[ck]))
            d = np.abs(master.astype(np.float64) - packed_w0)
            ratio = d[nonzero] / half
            hists.append((s, label, np.histogram(np.clip(ratio, BINS[0], BINS[-1]), BINS)[0]))
            row = {"seed": s, "level": label, "fraction": q, "target_step": step, "step": ck,
                   "median": float(np.median(ratio)), "mean": float(np.mean(ratio)),
                   "below_one": float(np.mean(ratio < 1.0)), "max_abs_drift": float(d.max()),
                   "lr": lr, "zero_weights_left_out": int((~nonzero).sum())}
            if fp8_part is not None:  # the FP8 matrices alone (the rest is BF16)
                row["fp8_matrices"] = {"median": float(np.median(ratio[fp8_part])),
                                       "below_one": float(np.mean(ratio[fp8_part] < 1.0)),
                                       "fraction_of_weights": float(np.mean(fp8_part))}
            if not a.no_probe:
                fp16_dir = os.path.join(a.sweep, "drift", f"seed{s}_step{ck}_fp16")
                bf16_dir = os.path.join(a.sweep, "drift", f"seed{s}_step{ck}_{grid.tag}")
                if not os.path.exists(os.path.join(fp16_dir, "model.safetensors")):
                    base.write_model(fp16_dir, master.astype(np.float16).astype(np.float32))
                if not os.path.exists(os.path.join(bf16_dir, "model.safetensors")):
                    base.write_model(bf16_dir, grid.round(master))  # FP8: the scales of this master
                acc0 = evaluate(a.unstuck, base_dir, samples, cache)
                acc16 = evaluate(a.unstuck, fp16_dir, samples, cache)
                accbf = evaluate(a.unstuck, bf16_dir, samples, cache)
                json.dump(cache, open(cache_path, "w"), indent=1)
                row["probe"] = {"base": acc0, "unrounded": acc16, "bf16_rounded": accbf, "samples": samples,
                                "retained": (accbf - acc0) / (acc16 - acc0) if acc16 != acc0 else None}
            rows.append(row)
    return ref, rows, hists, series, grid


def plots(folder, ref, rows, hists, series, grid):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    written = []

    def finish(fig, ax, name, xlabel, ylabel, title, legend_size=7, grid_axis="both"):
        if xlabel:
            ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis=grid_axis)
        ax.legend(fontsize=legend_size)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, name), dpi=110)
        plt.close(fig)
        written.append(name)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    centers = np.sqrt(BINS[:-1] * BINS[1:])
    for s, label, h in hists:
        ax.step(centers, h / max(1, h.sum()), where="mid", label=f"seed {s}, {label}", lw=1.3)
    ax.axvline(1.0, color="black", ls="--", lw=1, label="1 half-ulp (RN moves the weight)")
    ax.set_xscale("log")
    finish(fig, ax, "drift_histogram.png", f"|w_t - w_0| in {grid.name} half-ulps of w_0", "fraction of weights",
           f"drift of {ref}'s master at 50% / 100% of its gain")
    if series:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for s in sorted({p["seed"] for p in series}):
            pts = [p for p in series if p["seed"] == s]
            ax.plot([p["step"] for p in pts], [p["median"] for p in pts], marker="o", label=f"seed {s}: median drift")
            ax.plot([p["step"] for p in pts], [p["below_one"] for p in pts], ls="--", marker=".",
                    label=f"seed {s}: fraction below 1 half-ulp")
        ax.axhline(1.0, color="black", lw=0.8)
        finish(fig, ax, "drift_vs_step.png", "GRPO step (kept checkpoints)", f"{grid.name} half-ulps / fraction",
               f"drift of {ref}'s master from the base, in {grid.name} half-ulps")
    probed = [r for r in rows if r.get("probe")]
    if probed:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        x = np.arange(len(probed))
        gain16 = [r["probe"]["unrounded"] - r["probe"]["base"] for r in probed]
        gainbf = [r["probe"]["bf16_rounded"] - r["probe"]["base"] for r in probed]
        ax.bar(x - 0.2, gain16, 0.4, label=f"{ref} weights (unrounded)", color="tab:blue")
        ax.bar(x + 0.2, gainbf, 0.4, label=f"same master rounded to nearest {grid.name}", color="tab:red")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(x, [f"s{r['seed']} {r['level']}\nstep {r['step']}" for r in probed], fontsize=7)
        finish(fig, ax, "retained_gain.png", None, "greedy eval accuracy minus the base's",
               f"retained-gain probe ({probed[0]['probe']['samples']} test records, FP32 compute)",
               legend_size=8, grid_axis="y")
    return written


def definition(grid):
    g = grid.name
    return ("From the reference arm's checkpoints (the nearest kept one to the step where its training reward, "
            f"averaged as in the table, reaches 50% and 100% of its gain, and the last one): *drift* = |w_t - w_0| / "
            f"half a {g} ulp of w_0 per weight (w_0: the base as the runs start; exact zeros left out); "
            f"round-to-nearest keeps a {g} weight at w_0 while its drift is below 1, so *drift < 1 half-ulp* is the "
            "fraction of weights whose progress BF16-RN would not show yet. *Retained gain*: greedy eval accuracy "
            f"(FP32 compute) of the master rounded to nearest {g} minus the base's, over the same for the FP16 weights."
            + (" On FP8's grid (fp8_rn's compute weights): the layers' matrices in half-ulps of E4M3 times w_0's "
               "power-of-two scale of each output channel, the embedding, norms and head (BF16 in fp8_rn) in BF16 "
               "half-ulps; the rounded master takes its own scales, as fp8_rn does." if grid.fp8 else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True, help="sweep folder written by scripts/compare.py")
    ap.add_argument("--plots", required=True, help="folder for drift_histogram.png and retained_gain.png")
    ap.add_argument("--unstuck", default=os.path.join("build", "unstuck"), help="the unstuck binary")
    ap.add_argument("--arm", help="arm to analyse (default: the sweep's reference arm)")
    ap.add_argument("--eval-samples", type=int, help="test records per probe evaluation (default: the sweep's)")
    ap.add_argument("--no-probe", action="store_true", help="drift histogram only")
    a = ap.parse_args()
    try:
        ref, rows, hists, series, grid = analyse(a)
    except (DriftError, SweepError, OSError, KeyError) as e:
        print(f"paper_drift.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    written = plots(a.plots, ref, rows, hists, series, grid)
    out = os.path.join(a.sweep, "drift.json")
    with open(out + ".tmp", "w") as f:
        json.dump({"arm": ref, "grid": grid.name, "bits": 0 if grid.fp8 else grid.bits, "fp8": grid.fp8,
                   "definition": definition(grid), "rows": rows,
                   "series": series, "plots": written}, f, indent=1)
    os.replace(out + ".tmp", out)
    for r in rows:
        p = r.get("probe")
        print(f"paper_drift.py: seed {r['seed']} {r['level']} step {r['step']}: median drift {r['median']:.2f} "
              f"{grid.name} half-ulps, {100 * r['below_one']:.1f}% below 1"
              + (f"; eval acc base {p['base']:.3f}, FP16 {p['unrounded']:.3f}, RN {p['bf16_rounded']:.3f}"
                 if p else ""))
    for s in sorted({p["seed"] for p in series}):
        print(f"paper_drift.py: seed {s} median drift by step: " + ", ".join(
            f"{p['step']}: {p['median']:.2f}" for p in series if p["seed"] == s))
    print(f"paper_drift.py: wrote {out} and {len(written)} plots in {a.plots}")

