"""The Trainer's profiler when the config names none.

Lightning's default, PassThroughProfiler, times nothing, but its `profile()` is a contextlib generator that the
loop enters around every hook it calls (about 20 times a training step): some ten Python calls each. NoProfiler
hands back one reusable null context instead. A profiler the config names (`debug=profiler`,
`+trainer.profiler=simple`) is used as it is."""

from __future__ import annotations

import contextlib

from lightning.pytorch.profilers import Profiler

_NOTHING = contextlib.nullcontext()


class NoProfiler(Profiler):
    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass

    def profile(self, action_name: str) -> contextlib.AbstractContextManager:
        return _NOTHING
