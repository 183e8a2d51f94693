"""A callback that sends this process a signal at one exact point of training, for the tests that need
the signal there and nowhere else (a signal sent from outside lands wherever the run happens to be)."""

from __future__ import annotations

import os
import signal
import time

import lightning as L

from brisk.registry import CALLBACKS


@CALLBACKS.register("sigterm_at")  # a run names it: imports=[signal_at] +callbacks.x.type=sigterm_at
class SigtermAt(L.Callback):
    """SIGTERM (or `signum`) at `hook` of `epoch` (and batch `batch` for train_batch_end), on every rank or on
    `rank` only; when `sent` names a file, the time it was sent goes there."""

    def __init__(
        self, hook: str, epoch: int = 0, batch: int = 0, rank: int | None = None, signum: int = 15, sent: str = ""
    ) -> None:
        self.hook, self.epoch, self.batch, self.rank, self.signum, self.sent = hook, epoch, batch, rank, signum, sent

    def _fire(self, trainer: L.Trainer, hook: str, batch: int = 0) -> None:
        if (
            hook == self.hook
            and (trainer.current_epoch, batch) == (self.epoch, self.batch)
            and self.rank in (None, trainer.global_rank)
            and not trainer.sanity_checking
        ):
            if self.sent:
                with open(self.sent, "w") as f:
                    f.write(str(time.time()))
            os.kill(os.getpid(), signal.Signals(self.signum))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._fire(trainer, "train_epoch_end")

    def on_validation_start(self, trainer, pl_module) -> None:
        self._fire(trainer, "validation_start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._fire(trainer, "train_batch_end", batch_idx)
