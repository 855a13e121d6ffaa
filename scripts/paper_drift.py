#!/usr/bin/env python3
"""The drift of FP16's weights in BF16 half-ulps and the retained-gain probe.

The command line of paper/drift.py, which holds the code; --help lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper.drift import main  # noqa: E402

if __name__ == "__main__":
    main()
