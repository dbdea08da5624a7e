"""posexp's version, and where its source is (for the code version a run records)."""

from pathlib import Path

__version__ = "0.1.0"
SOURCE = Path(__file__).resolve().parent  # the posexp package directory
