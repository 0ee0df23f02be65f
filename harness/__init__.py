"""Kernel harness: is this candidate kernel correct, and how much faster is it than the reference?"""

__version__ = "0.1.0"
