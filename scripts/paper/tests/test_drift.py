#!/usr/bin/env python3
"""paper/drift.py's grid arithmetic against its definition: rounding to nearest (ties to even)
onto BF16 and onto the grid-scaled analog's grids (1-6 mantissa bits, as bf16_coarse_rn in
include/unstuck/precision/round_math.h), and the half-ulp the drift is measured in; FP8's grid
(E4M3FN with a power-of-two scale per output channel, include/unstuck/precision/fp8.h) against
libtorch's float8_e4m3fn conversion and the scale rule's definition. Run by ctest (`paper.drift`);
exits non-zero on the first failed check. Fixed seed; the checks are exact.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from paper.drift import Fp8Grid, fp8_exponents, half_ulp, sweep_grid, to_fp8, to_grid  # noqa: E402


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def main():
    rng = np.random.default_rng(29)
    n = 100000
    # Signed values over 2^-29 .. 2^7 (weights and beyond), plus exact ties at every grid.
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 5, n))).astype(np.float32)
    u = x.view(np.uint32)
    bf16 = lambda v: torch.from_numpy(v).to(torch.bfloat16).to(torch.float32).numpy()
    for bits in (0, 7):
        for name, v in (("random", x), ("ties", ((u & ~np.uint32(0xFFFF)) | np.uint32(0x8000)).view(np.float32))):
            check(np.array_equal(to_grid(v, bits).view(np.uint32), bf16(v).view(np.uint32)),
                  f"to_grid(bits={bits}) is libtorch's BF16 rounding on {name} values")
    xd = x.astype(np.float64)
    spacing = np.ldexp(1.0, np.frexp(np.abs(xd))[1] - 1)  # 2^E for |x| in [2^E, 2^(E+1))
    for bits in range(1, 7):
        d = 23 - bits
        g = to_grid(x, bits)
        step = spacing / 2 ** bits
        down = (u & ~np.uint32((1 << d) - 1)).view(np.float32).astype(np.float64)  # toward zero on the grid
        up = np.sign(xd) * (np.abs(down) + step)
        check(np.all((g.view(np.uint32) & np.uint32((1 << d) - 1)) == 0), f"{bits} bits: results lie on the grid")
        err = np.abs(g.astype(np.float64) - xd)
        check(np.array_equal(err, np.minimum(np.abs(xd - down), np.abs(up - xd))), f"{bits} bits: the nearest point")
        mid = np.sign(xd) * (np.abs(down) + step / 2)  # exact midpoints go to the even neighbour
        tie = to_grid(mid.astype(np.float32), bits).view(np.uint32)
        check(np.all(((tie >> np.uint32(d)) & np.uint32(1)) == 0), f"{bits} bits: ties go to even")
        check(np.array_equal(half_ulp(xd, bits), step / 2), f"{bits} bits: half_ulp is half the grid's spacing")
    check(np.array_equal(half_ulp(xd, 0), spacing / 2 ** 8), "BF16's half-ulp is 2^(E - 8)")
    check_fp8(rng)


def check_fp8(rng):
    # The scale rule: the smallest integer e with amax <= 448 x 2^e, on random maxima and on the edges.
    amax = np.concatenate([(np.exp(rng.uniform(-30, 12, 20000))).astype(np.float32),
                           np.float32([448, 448.5, 1, 1.75, 1.76, 224, 2.0 ** -130])])
    e = fp8_exponents(amax)
    a64 = amax.astype(np.float64)
    check(np.all(a64 <= 448 * np.ldexp(1.0, e)) and np.all(a64 > 448 * np.ldexp(1.0, e - 1)),
          "fp8_exponents: the smallest e with amax <= 448 x 2^e")
    check(list(e[-7:-1]) == [0, 1, -8, -8, -7, -1] and fp8_exponents(np.float32([0]))[0] == 0,
          "fp8_exponents: 448 -> 0, 448.5 -> 1, 1 -> -8, 1.75 -> -8, 1.76 -> -7, 224 -> -1, 0 -> 0")
    # Nearest on E4M3 times 2^e: libtorch's float8_e4m3fn conversion (round to nearest even) of x / 2^e,
    # on rows whose scale is their own amax's (so nothing saturates), subnormals and ties included.
    rows = (rng.standard_normal((64, 512)) * np.exp(rng.uniform(-12, 4, (64, 1)))).astype(np.float32)
    rows[:, :8] *= np.float32(2.0 ** -12)  # deep in E4M3's subnormal range after the scale
    e = fp8_exponents(np.abs(rows).max(axis=1))[:, None]
    ours = to_fp8(rows, e)
    q = torch.from_numpy(np.ldexp(rows.astype(np.float64), -e).astype(np.float32))
    ref = np.ldexp(q.to(torch.float8_e4m3fn).to(torch.float64).numpy(), e).astype(np.float32)
    check(np.array_equal(ours, ref), "to_fp8 is libtorch's float8_e4m3fn rounding of x / 2^e, times 2^e")
    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float64).numpy()
    grid = np.unique(np.abs(grid[np.isfinite(grid)]))
    mids = (grid[:-1] + grid[1:]) / 2  # exact ties: to the neighbour with an even code
    tie = to_fp8(mids.astype(np.float32), np.zeros(mids.size, dtype=np.int64))
    codes = torch.from_numpy(tie).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    check(np.all(codes % 2 == 0), "to_fp8: exact midpoints of E4M3 go to the even code")

    # Fp8Grid on a packed toy layout: FP8 matrices per row, BF16 elsewhere; its half-ulp is half the
    # distance to the next point above w (nonzero grid points w below each row's top binade edge).
    class Base:
        order = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                 "model.layers.0.input_layernorm.weight"]
        shapes = {order[0]: (16, 8), order[1]: (12, 40), order[2]: (8,)}
    g = Fp8Grid(Base())
    packed = (rng.standard_normal(16 * 8 + 12 * 40 + 8) * 0.05).astype(np.float32)
    w = g.round(packed)
    check(np.array_equal(g.round(w), w), "Fp8Grid.round is idempotent (the grid is closed)")
    mask = g.fp8_mask(w.size)
    check(mask.sum() == 12 * 40 and mask[16 * 8] and not mask[0] and not mask[-1], "Fp8Grid: the FP8 part is the matrix")
    check(np.array_equal(w[~mask], to_grid(packed[~mask], 0)), "Fp8Grid: BF16 outside the layers' matrices")
    m = packed[mask].reshape(12, 40)
    check(np.array_equal(w[mask].reshape(12, 40), to_fp8(m, fp8_exponents(np.abs(m).max(axis=1))[:, None])),
          "Fp8Grid: each matrix row on E4M3 with its own scale")
    half = g.half_ulp(w.astype(np.float64))
    pos = (w > 0) & (np.abs(w) < np.float32(0.9) * np.abs(w).max())
    up_near = g.round((w + 0.99 * half).astype(np.float32))
    up_far = g.round((w + 1.01 * half).astype(np.float32))
    # a row's scale may move with the perturbed value only at its amax, which `pos` keeps out
    check(np.array_equal(up_near[pos], w[pos]) and np.all(up_far[pos] > w[pos]),
          "Fp8Grid.half_ulp: w + 0.99 half-ulp rounds back to w, w + 1.01 half-ulp to the next point")
    sweep = {"arm_overrides": {"fp16": ["configs/paper/fp16.yaml"],
                               "bf16": ["configs/paper/bf16.yaml", "precision.mode=fp8_rn"]}}
    check(sweep_grid(sweep, 0) == "fp8" and sweep_grid({"arm_overrides": {}}, 3) == 3,
          "sweep_grid: FP8 when an arm runs an FP8 mode, else the analog's bits")


if __name__ == "__main__":
    main()
