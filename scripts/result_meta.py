"""Where a committed result came from: the CPU, its flags, the checkout's commit, and writing the data file.

Shared by the scripts that write data under docs/results/ (bench_precision.py, bench_compute.py,
bench_reward.py, lora_sticking.py), so every figure names its machine the same way."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lscpu():
    """(lscpu's model name, its flags as a set); ("unknown", set()) where lscpu is missing."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown", set()
    name, flags = "unknown", set()
    for line in out.splitlines():
        if line.startswith("Model name:"):
            name = line.split(":", 1)[1].strip()
        if line.startswith("Flags:"):
            flags = set(line.split(":", 1)[1].split())
    return name, flags


def cpu_name():
    return lscpu()[0]


def commit():
    """The checkout's short commit hash."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()


def write_data(path, data):
    """Writes `data` as indented JSON with a final newline, making the folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
