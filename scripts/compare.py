#!/usr/bin/env python3
"""Paired comparison of precision modes (the paper's sweep driver).

The command line of paper/sweep.py, which holds the code; --help lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper.sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
