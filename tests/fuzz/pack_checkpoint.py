#!/usr/bin/env python3
"""Packs a checkpoint directory (runs/<run>/checkpoints/step_N) into one input of the fuzz_checkpoint
libFuzzer target: sections "\\n@@unstuck-file:<name>\\n<bytes>". Without --manifest the target seals
the files itself (sizes and checksums that match), so mutations reach the contents checks.
  tests/fuzz/pack_checkpoint.py CKPT_DIR OUT [--manifest] [--fits 'PARAMS RECORDS']"""
import argparse
import pathlib

FILES = ["state.safetensors", "rng.bin", "trainer.json", "config.yaml"]

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", type=pathlib.Path)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--manifest", action="store_true", help="include the directory's manifest.json as is")
    ap.add_argument("--fits", help="the model parameters and training records the run expects")
    args = ap.parse_args()
    names = FILES + (["manifest.json"] if args.manifest else [])
    out = b"".join(b"\n@@unstuck-file:" + n.encode() + b"\n" + (args.ckpt / n).read_bytes() for n in names)
    if args.fits:
        out += b"\n@@unstuck-file:fits\n" + args.fits.encode()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(out)
    print(f"{args.out}: {len(out)} bytes")

if __name__ == "__main__":
    main()
