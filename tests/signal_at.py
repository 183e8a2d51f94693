"""A callback that sends this process SIGTERM at one exact point of training, for the tests that need
the signal there and nowhere else (a signal sent from outside lands wherever the run happens to be)."""

from __future__ import annotations

import os
import signal

import lightning as L


class SigtermAt(L.Callback):
    def __init__(self, hook: str, epoch: int = 0) -> None:
        self.hook, self.epoch = hook, epoch

    def _fire(self, trainer: L.Trainer, hook: str) -> None:
        if hook == self.hook and trainer.current_epoch == self.epoch and not trainer.sanity_checking:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._fire(trainer, "train_epoch_end")

    def on_validation_start(self, trainer, pl_module) -> None:
        self._fire(trainer, "validation_start")
