"""brisk's checkpoint callbacks: Lightning's ModelCheckpoint without its cost on steps where it has nothing to
do, and LastCheckpoint, last.ckpt at every epoch end and, optionally, every N optimizer steps in between.

Lightning's ModelCheckpoint costs ~20 us on every training step even when it saves only at epoch ends
(10 of them added 0.25 ms per step at nil compute): its on_train_batch_end runs its skip checks, and
Lightning builds the callback's `state_key`, a repr of five settings, each time it calls one of its
hooks. The subclass keeps the same name, so its state_key, and the checkpoints it reads and writes,
are the same as Lightning's.

Lightning's ModelCheckpoint takes `every_n_epochs` or `every_n_train_steps`, not both. Steps alone
leave last.ckpt behind the end of training (unless N divides the run), and a step checkpoint on an
epoch's last batch is written before that epoch's validation: resumed from it, lightning 2.6.6
counts the epoch as finished and never validates it, so the resumed run is not the original one.
This one keeps the epoch-end write and adds step writes that skip an epoch's last batch.
"""

from __future__ import annotations

from functools import cached_property

from lightning.pytorch import callbacks

from brisk import compat
from brisk.registry import CALLBACKS


@CALLBACKS.register("model_checkpoint")
class ModelCheckpoint(callbacks.ModelCheckpoint):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not self.acts_on_steps():
            # Not callable: Lightning's dispatch skips it (see compat.BATCH_HOOKS).
            self.on_train_batch_end = None

    def acts_on_steps(self) -> bool:
        # Lightning's hook saves only on a step or a time trigger (lightning 2.6.6); without one it only runs checks.
        return compat.saves_on_steps(self)

    @cached_property
    def state_key(self) -> str:
        # What it is built from (monitor, mode and the save triggers) is fixed when the callback is made.
        return super().state_key


@CALLBACKS.register("last_checkpoint")
class LastCheckpoint(ModelCheckpoint):
    def __init__(self, *args, every_n_train_steps: int | None = None, **kwargs) -> None:
        if every_n_train_steps is not None and every_n_train_steps < 0:
            raise ValueError(f"every_n_train_steps={every_n_train_steps} must be >= 0")
        self.step_interval = every_n_train_steps or 0
        super().__init__(*args, **kwargs)

    def acts_on_steps(self) -> bool:
        return bool(self.step_interval) or super().acts_on_steps()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if compat.saves_on_steps(self):  # only its own triggers: without them Lightning's hook only runs checks
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if (
            not self.step_interval
            or trainer.global_step % self.step_interval
            or trainer.fit_loop.epoch_loop.batch_progress.is_last_batch  # the epoch-end write follows
        ):
            return
        compat.save_now(self, trainer)
