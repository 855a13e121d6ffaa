#!/usr/bin/env python3
"""paper/drift.py's grid arithmetic against its definition: rounding to nearest (ties to even)
onto BF16 and onto the grid-scaled analog's grids (1-6 mantissa bits, as bf16_coarse_rn in
include/unstuck/precision/round_math.h), and the half-ulp the drift is measured in. Run by ctest
(`paper.drift`); exits non-zero on the first failed check. Fixed seed; the checks are exact.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from paper.drift import half_ulp, to_grid  # noqa: E402


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


if __name__ == "__main__":
    main()
