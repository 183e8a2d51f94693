"""Timing a run of training steps: uncounted warm-up steps, then a measured window.

The device is synchronised only at the window's edges (and after the first step, whose time is
reported separately because it holds lazy initialisation and torch.compile). A sync per step would
itself be the kind of per-step overhead the lab is looking for.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig

from brisk import CALLBACKS, BriskError, sync
from brisk_lab.memory import PeakMemory


class CallCount:
    """Function calls (Python and built-in) made by this thread while it is on: a count of the Python work per
    step that, unlike a clock, reads the same on every run. Counting slows the calls down, so a counted
    window is not also timed."""

    def __init__(self) -> None:
        self.calls = 0

    def _event(self, frame, event: str, arg) -> None:
        if event == "call" or event == "c_call":
            self.calls += 1

    def start(self) -> None:
        sys.setprofile(self._event)

    def stop(self) -> None:
        sys.setprofile(None)


class Window:
    """Call `start()` before the first step and `tick(images)` after each; `tick` says when to stop.

    With `count_calls`, the window counts function calls instead of timing (see CallCount)."""

    def __init__(self, warmup: int, steps: int, device: torch.device, count_calls: bool = False) -> None:
        self.warmup, self.steps, self.device = warmup, steps, device
        self.count = self.images = 0
        self.first_step_s: float | None = None
        self._t_start = self._t0 = self._t1 = 0.0
        self.calls = CallCount() if count_calls else None

    def _now(self) -> float:
        sync(self.device)
        return time.perf_counter()

    def start(self) -> None:
        self._t_start = self._t0 = self._now()

    def tick(self, images: int) -> bool:
        self.count += 1
        if self.count == 1:
            self.first_step_s = self._now() - self._t_start
        if self.count == self.warmup:
            self._t0 = self._now()
            if self.calls:
                self.calls.start()
        elif self.count > self.warmup:
            self.images += images
            if self.count == self.warmup + self.steps:
                if self.calls:
                    self.calls.stop()
                self._t1 = self._now()
        return self.count >= self.warmup + self.steps

    def result(self) -> dict[str, float]:
        measured = min(self.count, self.warmup + self.steps) - self.warmup
        if measured <= 0:
            raise BriskError(
                f"the lab timed {self.count} step(s) but needs more than warmup={self.warmup}: "
                "lower bench.*.warmup, or raise trainer.max_epochs / the data size."
            )
        if self.count < self.warmup + self.steps:  # training ended early: measure what ran
            if self.calls:
                self.calls.stop()
            self._t1 = self._now()
        seconds = self._t1 - self._t0
        return {
            "images_per_sec": self.images / seconds,
            "batch_s": seconds / measured,
            "first_step_s": self.first_step_s,
            "loop_s": self._t1 - self._t_start,
            "batches": measured,
            **({"calls_per_step": self.calls.calls / measured} if self.calls else {}),
        }


@CALLBACKS.register("lab_fit")
class LabFit(L.Callback):
    """Marks a fit as the lab's. A stop signal (SIGTERM, Ctrl-C) then says that a bench is run again, not resumed:
    brisk's SigtermCheckpoint reads `interrupted_hint` from the Trainer's callbacks instead of telling the user to
    resume the fit from its checkpoint, which is in a scratch folder that is gone by then. The lab's fits carry it
    through their StepClock (a LabFit), or as `lab_fit` where there is no clock (the speedrun's fits)."""

    def __init__(self) -> None:
        # Read where the Trainer is built: brisk-bench's own run folder, which holds what it measured so far.
        where = Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None
        finished = f"bench.json and bench.md in {where}" if where else "bench.json and bench.md in its run folder"
        self.interrupted_hint = (
            f"A bench is not resumed: {finished} hold the parts it finished, if any; run "
            "brisk-bench again, with bench.run=[...] naming the parts it had left."
        )


@CALLBACKS.register("lab_clock")
class StepClock(LabFit):
    """A Window over a Lightning fit. It stops the fit when the window is full, so the lab never
    changes the config it measures (limit_train_batches stays free for the data-scale lever).

    After fit, `result` holds the window, the last step's loss and the peak memory (summed over ranks).
    """

    def __init__(self, warmup: int = 2, steps: int = 5, count_calls: bool = False) -> None:
        super().__init__()
        self.warmup, self.steps, self.count_calls = warmup, steps, count_calls
        self.result: dict[str, float] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.memory = PeakMemory(trainer.strategy.root_device)
        self.memory.reset()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.window = Window(self.warmup, self.steps, trainer.strategy.root_device, self.count_calls)
        self._loss: torch.Tensor | None = None
        self.window.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._loss = loss.detach()  # read once at the end, not per step
        if self.window.tick(len(batch[1]) * trainer.world_size):
            trainer.should_stop = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        memory = self.memory.read()
        if trainer.world_size > 1:  # every rank's process counts
            device = trainer.strategy.root_device
            memory = {
                k: float(trainer.strategy.reduce(torch.tensor(v, device=device), reduce_op="sum"))
                for k, v in memory.items()
            }
        self.result = {
            **self.window.result(),
            "loss": float(self._loss) if self._loss is not None else float("nan"),
            **memory,
            "memory": self.memory.kind,
        }
