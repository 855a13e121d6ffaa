#!/usr/bin/env python3
"""The README's table of scripts/reproduce.sh's CPU presets, from their committed data.

The command line of paper/presets.py, which holds the code; --help lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper.presets import main  # noqa: E402

if __name__ == "__main__":
    main()
