"""StartupClock: seconds from the process's start to its first training step (summary.json's startup_seconds).

What a user waits before anything trains: interpreter start, imports, config composition, building,
reading the data, the sanity check. The start is the kernel's record of the process (/proc), so
imports that run before brisk's own code count too.
"""

from __future__ import annotations

import os
import time

import lightning as L

import brisk


def process_age() -> float:
    """Seconds since this process started; where /proc is missing, since brisk was first imported."""
    try:
        with open("/proc/self/stat") as f:
            # Field 22, starttime, in clock ticks after boot; the name (field 2) may hold spaces: count from ')'.
            started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - started  # both since boot, to 10 ms
    except (OSError, ValueError, IndexError):
        return time.monotonic() - brisk.IMPORTED_AT


class StartupClock(L.Callback):
    def __init__(self) -> None:
        self.seconds: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self.seconds is None:
            self.seconds = process_age()
        # Once is all. Lightning skips a hook that is not callable (see brisk.fastloop.BATCH_HOOKS).
        self.on_train_batch_start = None
