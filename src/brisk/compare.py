"""brisk-compare <folder>: every run below a folder side by side, as comparison.csv, comparison.md and
comparison.png in that folder. Prints the three paths, then the folder.

The columns are the overrides that differ between the runs and the main metrics (brisk.search.comparison).
A sweep writes the same files into its folder when it ends."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from brisk.errors import BriskError, refuse
from brisk.search import comparison


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="brisk-compare",
        description="Compare the runs below a folder (each with a summary.json): a CSV and a Markdown table and a "
        "plot, written into the folder.",
    )
    parser.add_argument("folder", type=Path, help="e.g. logs/train/runs or logs/train/multiruns/<sweep>")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="brisk: warning: %(message)s")  # a summary skipped
    try:
        comparison.publish(args.folder.absolute())
    except BriskError as e:
        refuse(e)


if __name__ == "__main__":
    main()
