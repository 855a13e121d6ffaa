#!/usr/bin/env python3
"""The middle-difficulty prompt pool of a base policy.

The command line of paper/pool.py, which holds the code; --help lists the options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paper.pool import main  # noqa: E402

if __name__ == "__main__":
    main()
