"""The lab's progress lines, on stderr: stdout carries the tables and ends with the run folder.

A part runs for minutes with nothing to show until its table (`preset=quick` can run past 7 minutes on a busy 2-core
machine, `bench.run=[speedrun] bench.speedrun.parts=null` past 4 at load 4-5).
One line per round or fit says how far it is; the load average beside it says why it may be slow.
"""

from __future__ import annotations

import os
import sys
import time

_started: float | None = None


def start() -> None:
    """The lab's clock for the lines' `at <s> s`: brisk-bench starts it before its first part."""
    global _started
    _started = time.perf_counter()


def progress(message: str) -> None:
    at = f" at {time.perf_counter() - _started:.0f} s" if _started is not None else ""
    print(f"bench: {message}{at}, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
