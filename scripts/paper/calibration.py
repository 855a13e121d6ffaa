"""Where a learning rate sits against the rounding grids of a base policy's weights.

Round-to-nearest keeps a compute weight where it is while the master has moved less than half an
ulp of it: 2^(e-8) in BF16 (8 significant bits) and 2^(e-11) in FP16 (11 bits), for |w| in
[2^e, 2^(e+1)), i.e. between |w|/512 and |w|/256 in BF16 and |w|/4096 and |w|/2048 in FP16. With
Adam a weight moves by up to about the LR per step, so for each LR this prints the fraction of the
weights (BF16-rounded, as the reproduction starts) whose half ulp exceeds the LR: the weights that
one step at that LR cannot move in that format. Used by docs/CALIBRATION.md.

    .venv/bin/python scripts/paper_calibration.py --model runs/sft-countdown/model \
        --lrs 5e-6,1e-5,2e-5,5e-5,1e-4
"""
import argparse
import os
import sys

import numpy as np


def half_ulp(a, mantissa_bits, min_exp):
    """Half the spacing of the format's grid at |a| (normal range; subnormal spacing below)."""
    e = np.floor(np.log2(np.maximum(a, 2.0 ** min_exp)))
    return 2.0 ** (e - mantissa_bits - 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="policy directory with model.safetensors")
    ap.add_argument("--lrs", default="5e-6,1e-5,2e-5,5e-5,1e-4,2e-4", help="comma-separated LRs")
    a = ap.parse_args()
    path = os.path.join(a.model, "model.safetensors")
    if not os.path.exists(path):
        sys.exit(f"paper_calibration.py: error: {path} not found")
    from safetensors.numpy import load_file
    import torch

    tensors = load_file(path)
    groups = {"matrices (attention, MLP)": [], "embeddings and lm_head": [], "norm gains": []}
    for name, t in tensors.items():
        w = torch.from_numpy(t.astype(np.float32)).to(torch.bfloat16).to(torch.float32).numpy()
        a_ = np.abs(w.ravel())
        if "norm" in name:
            groups["norm gains"].append(a_)
        elif "embed" in name or "lm_head" in name:
            groups["embeddings and lm_head"].append(a_)
        else:
            groups["matrices (attention, MLP)"].append(a_)
    groups = {k: np.concatenate(v) for k, v in groups.items() if v}
    every = np.concatenate(list(groups.values()))
    lrs = [float(x) for x in a.lrs.split(",")]
    print(f"model {a.model}: {every.size} weights (BF16-rounded)")
    print("| weights | count | median abs | 10% / 90% abs | median half-ulp BF16 | median half-ulp FP16 |")
    print("|---|---|---|---|---|---|")
    for name, v in list(groups.items()) + [("all", every)]:
        nz = v[v > 0]
        print(f"| {name} | {v.size} | {np.median(v):.3g} | {np.percentile(v, 10):.2g} / {np.percentile(v, 90):.2g} | "
              f"{np.median(half_ulp(nz, 7, -133)):.2g} | {np.median(half_ulp(nz, 10, -14)):.2g} |")
    print()
    print("| LR | BF16: half-ulp > LR | FP16: half-ulp > LR | norm gains BF16 / FP16 |")
    print("|---|---|---|---|")
    norms = groups.get("norm gains", np.array([1.0]))
    for lr in lrs:
        stuck_bf = (half_ulp(every, 7, -133) > lr).mean()
        stuck_fp = (half_ulp(every, 10, -14) > lr).mean()
        nb = (half_ulp(norms, 7, -133) > lr).mean()
        nf = (half_ulp(norms, 10, -14) > lr).mean()
        print(f"| {lr:.0e} | {stuck_bf:.3f} | {stuck_fp:.3f} | {nb:.2f} / {nf:.2f} |")

