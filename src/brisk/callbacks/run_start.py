"""RunStart: marks a training run as started once its first optimizer step is done, by calling `start` (brisk-train
passes the writing of the run's record, brisk.run.rundir). Until then a refusal removes the run directory this
invocation created, whatever wrote into it; from then on a failure keeps it.

The first step, not the fit's start: much is refused inside `fit` before anything trains (a logger's folder or
account, the schedule's plan, the net's first forward in the sanity check, a callback's first batch end), and
one mark after all of them covers each, in whatever order they run. Its on_train_batch_end runs after those of
the callbacks listed before it (Lightning calls them in list order): brisk-train adds it last.
"""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException


class RunStart(L.Callback):
    """`start`: called once, on global rank 0; None on the ranks that record nothing. Picklable (a bound method of
    plain data), since ddp_spawn sends the callbacks to its processes and the record is written from there."""

    def __init__(self, start: Callable[[], None] | None) -> None:
        self.start = start
        self._from = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._from = trainer.global_step  # a resume's first step is the one after its checkpoint's

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step > self._from:  # with accumulation, the batch that ends the first group
            self._started(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # SIGTERM or Ctrl-C in a stage (brisk.callbacks.SigtermCheckpoint): not a refusal. The run keeps its directory
        # and its record, as it always has, whether or not it stepped: its line says how to resume it.
        if isinstance(exception, SIGTERMException):
            self._started(trainer)

    def _started(self, trainer: L.Trainer) -> None:
        if trainer.is_global_zero and self.start is not None:
            self.start()
        self.on_train_batch_end = None  # done: Lightning's dispatch skips a hook that is not callable: no cost a step
