"""LastCheckpoint: last.ckpt at every epoch end and, optionally, every N optimizer steps in between.

Lightning's ModelCheckpoint takes `every_n_epochs` or `every_n_train_steps`, not both. Steps alone
leave last.ckpt behind the end of training (unless N divides the run), and a step checkpoint on an
epoch's last batch is written before that epoch's validation: resumed from it, lightning 2.6.6
counts the epoch as finished and never validates it, so the resumed run is not the original one.
This one keeps the epoch-end write and adds step writes that skip an epoch's last batch.
"""

from __future__ import annotations

from lightning.pytorch import callbacks

from brisk import compat
from brisk.errors import check
from brisk.registry import CALLBACKS


@CALLBACKS.register("last_checkpoint")
class LastCheckpoint(callbacks.ModelCheckpoint):
    def __init__(self, *args, every_n_train_steps: int | None = None, **kwargs) -> None:
        if every_n_train_steps is not None:  # null or 0: at epoch ends only
            key = "callbacks.last_checkpoint.every_n_train_steps"
            check(key, every_n_train_steps, lambda v: v >= 0, "a whole number >= 0 (or null)", int)
        self.step_interval = every_n_train_steps or 0
        # Lightning's own triggers within an epoch, as given: without one its per-step hook only runs checks.
        self.lightning_steps = kwargs.get("train_time_interval") is not None
        super().__init__(*args, **kwargs)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self.lightning_steps:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if (
            not self.step_interval
            or trainer.global_step % self.step_interval
            or trainer.fit_loop.epoch_loop.batch_progress.is_last_batch  # the epoch-end write follows
        ):
            return
        compat.save_now(self, trainer)
