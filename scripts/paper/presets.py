"""The table of scripts/reproduce.sh's CPU presets in README.md: each preset's report, the wall time its
committed run took and its outcome, every figure read from the data the run committed under
docs/results/<preset>/ (report_data.json and summary.json of a sweep, phase.json of a phase diagram).
A preset whose data was not kept says so and names its report instead of quoting it.

    .venv/bin/python scripts/paper_presets.py --table    # the markdown table, on stdout
"""
import argparse
import json
import os
import sys

from .arms import published

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The CPU presets in README order, with what each one is, in a few words.
ROWS = (
    ("quick", "the main job: FP16, BF16-RN at x and k*x, BF16-SR; 3 seeds x 200 steps"),
    ("phase", "BF16-RN's and BF16-SR's lags over the learning rate (1 seed)"),
    ("phase-analog", "the same over the rounding grid: BF16 with 6, 5, 4 mantissa bits (an analog, not a real format)"),
    ("quick-fp8", "--quick with FP8 E4M3 (per-channel scales) in BF16's place"),
    ("quick-analog", "--quick on the 5-bit analog grid, k = 1.7 (not a real format)"),
    ("quick-analog-pool", "--quick on a 3-bit analog grid, 64 prompts, x = 2e-5 (not a real format)"),
    ("full", "two model sizes x 4 arms x 5 seeds (this row: the small base; the wider base's report, "
             "RESULTS-full-wide.md, kept no data)"),
)


def load(path):
    path = os.path.join(ROOT, path)
    return json.load(open(path)) if os.path.exists(path) else None


def pct(values):
    """The range of fractions as whole percents: "3-4%", "-1 to 1%", "0%"."""
    lo, hi = (round(100 * v) for v in (min(values), max(values)))
    if lo == hi:
        return f"{lo}%"
    return f"{lo} to {hi}%" if lo < 0 else f"{lo}-{hi}%"


def sweep_outcome(summary):
    gains = ", ".join(f"{g:+.3f}" for g in summary["gain"].values())
    rn = "FP8-RN" if summary.get("fp8") else "BF16-RN"
    return (f"FP16's gain {gains}; {rn} @ x lags FP16's reward area by {pct(list(summary['lag'].values()))}; "
            f"claims 1 / 2 / 3: {' / '.join(summary['claims'])}; T1 / T2 / T3: {' / '.join(summary['targets'])}")


def phase_outcome(phase):
    def lags(arm):
        return ", ".join(f"{pct(row['arms'][arm]['area_lag'])}" for row in phase["rows"])
    axis = ("grids " + ", ".join(f"{row['bits'] or 7} bits" for row in phase["rows"]) if any(r["bits"] for r in phase["rows"])
            else "LRs " + ", ".join(f"{row['lr']:g}" for row in phase["rows"]))
    return f"at {axis}: BF16-RN lags FP16 by {lags('bf16')}, BF16-SR by {lags('bf16_sr')}"


def row(preset, what):
    doc, plots = published("paper-" + preset)
    link = f"[{os.path.basename(doc)}]({doc})"
    data = plots + "/"
    if preset.startswith("phase"):
        phase = load(data + "phase.json")
        return f"| `--{preset}` | {what} | {link} | {phase['timing']} | {phase_outcome(phase)} |"
    report, summary = load(data + "report_data.json"), load(data + "summary.json")
    if report is None or summary is None:
        return f"| `--{preset}` | {what} | {link} | data not kept | see its report (its per-step data was not kept) |"
    return f"| `--{preset}` | {what} | {link} | {report['timing']} | {sweep_outcome(summary)} |"


def table():
    lines = ["| preset | what it runs | report | wall time of the committed run | outcome |", "|---|---|---|---|---|"]
    lines += [row(preset, what) for preset, what in ROWS]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", required=True, help="print the markdown table")
    ap.parse_args(argv)
    sys.stdout.write(table())
