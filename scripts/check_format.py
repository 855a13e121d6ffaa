#!/usr/bin/env python3
"""Every C++ and CUDA file of src/, include/ and tests/ is formatted as .clang-format says (Google's
style at 120 columns), checked with clang-format 14, the version Debian 12 ships (scripts/setup.sh
installs it; another version formats some constructs differently, so only 14 is trusted).

Usage: scripts/check_format.py [--fix]   (--fix: format the files in place)"""
import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")


def clang_format():
    """The clang-format 14 binary, or None."""
    for name in ("clang-format-14", "clang-format"):
        path = shutil.which(name)
        if path:
            out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
            if " 14." in out:
                return path
    return None


def sources():
    out = []
    for top in ("src", "include", "tests"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "corpus")
            out += [os.path.join(folder, f) for f in sorted(files) if f.endswith(EXTENSIONS)]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fix", action="store_true", help="format the files in place")
    a = ap.parse_args(argv)
    binary = clang_format()
    if binary is None:
        print("check_format.py: clang-format 14 not found (Debian 12: apt-get install clang-format-14; "
              "scripts/setup.sh installs it)")
        return 1
    files = sources()
    bad = []
    for start in range(0, len(files), 50):
        chunk = files[start:start + 50]
        if a.fix:
            subprocess.run([binary, "-i", *chunk], check=True)
            continue
        for f in chunk:
            r = subprocess.run([binary, "--dry-run", "--Werror", f], capture_output=True, text=True)
            if r.returncode != 0:
                bad.append(os.path.relpath(f, ROOT))
    for f in bad:
        print(f"ERROR {f} is not formatted: scripts/check_format.py --fix (or clang-format-14 -i {f})")
    print(f"check_format.py: {len(files)} files, {len(bad)} not formatted ({binary})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
