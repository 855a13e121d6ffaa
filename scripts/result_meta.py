"""Where a committed result came from: the CPU, its flags, the checkout's commit, and writing the data file.

Shared by the scripts that write data under docs/results/ (bench_precision.py, bench_compute.py,
bench_reward.py, bench_sample.py, lora_sticking.py), so every figure names its machine the same way,
and so is their command line: --run measures and writes the data, --table prints a committed file's
table (run_or_table)."""
import json
import os
import subprocess
import sys

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


def run_or_table(parser, run, render, argv=None):
    """The main() of a data-writing script: `parser` holds its --run and its own options, this adds
    --table DATA...; then either run(args) or prints render(data, path, args) of each data file (path
    relative to the repository), a blank line between them. Returns the exit status."""
    parser.add_argument("--table", nargs="+", metavar="DATA", help="print the table of each committed data file")
    a = parser.parse_args(argv)
    if bool(a.run) == bool(a.table):
        parser.error("give --run or --table")
    if a.run:
        return run(a) or 0
    tables = []
    for path in a.table:
        with open(path) as f:
            tables.append(render(json.load(f), os.path.relpath(os.path.abspath(path), ROOT), a))
    sys.stdout.write("\n".join(tables))  # one blank line between tables
    return 0
