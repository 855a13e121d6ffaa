#!/usr/bin/env python3
"""The report of a sweep (RESULTS.md, plots, verdicts).

The command line of paper/report.py, which holds the code; --help lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper.report import main  # noqa: E402

if __name__ == "__main__":
    main()
