"""ProgressBar: Lightning's RichProgressBar, redrawn every N training steps instead of every step.

RichProgressBar reads the progress-bar metrics and redraws after every batch: at nil compute that is
most of the default callbacks' cost per step, and reading the metrics converts them to Python
numbers, a host sync per step on a GPU. Between redraws this skips the hook; the bar still moves
every N steps and at the end of each epoch.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


class ProgressBar(RichProgressBar):
    def __init__(self, every_n_steps: int = 20, **kwargs) -> None:
        super().__init__(**kwargs)
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps={every_n_steps} must be >= 1")
        self.every_n_steps = every_n_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        done = batch_idx + 1
        if done % self.every_n_steps == 0 or done >= self.total_train_batches:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
