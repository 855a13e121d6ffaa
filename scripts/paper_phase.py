#!/usr/bin/env python3
"""The phase diagram over the LR or the rounding grid.

The command line of paper/phase.py, which holds the code; --help lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper.phase import main  # noqa: E402

if __name__ == "__main__":
    main()
