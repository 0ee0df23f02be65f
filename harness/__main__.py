"""`python -m harness ...`: the command line (as `python run.py ...` in a checkout, or the
`kernel-harness` script of an installed package)."""

import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
