#!/usr/bin/env python3
"""Entry point: `python run.py --problem NAME` (see README.md)."""
import sys

from harness.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
