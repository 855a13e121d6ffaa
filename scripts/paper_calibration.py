#!/usr/bin/env python3
"""Where a learning rate sits against a base policy's rounding grids.

The command line of paper/calibration.py, which holds the code; --help lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper.calibration import main  # noqa: E402

if __name__ == "__main__":
    main()
