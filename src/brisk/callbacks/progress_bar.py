"""ProgressBar: Lightning's RichProgressBar, redrawn every N training steps instead of every step.

RichProgressBar reads the progress-bar metrics and redraws after every batch: at nil compute that is
most of the default callbacks' cost per step, and reading the metrics converts them to Python
numbers, a host sync per step on a GPU. Between redraws this skips the hook; the bar still moves
every N steps and at the end of each epoch.

Two of Lightning's fields are replaced. Its speed column takes rich's estimate, which needs two redraws
within 30 s and so read 0.00it/s on epochs of fewer than 2N steps: this bar shows the mean since the
epoch began. `v_num`, the logger's version, read "v_num: 0.000" (the bar formats every value as a
float): the run directory already names the run, so the bar leaves it out.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import ProcessingSpeedColumn
from rich.text import Text

from brisk.registry import CALLBACKS


class MeanSpeedColumn(ProcessingSpeedColumn):
    """Batches per second since the task (an epoch's bar) started, up to the moment it finished."""

    def render(self, task) -> Text:
        seconds = task.finished_time if task.finished_time is not None else task.elapsed
        speed = f"{task.completed / seconds:.2f}it/s" if seconds else ""
        return Text(speed, style=self.style)


@CALLBACKS.register("progress_bar")
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

    def configure_columns(self, trainer) -> list:
        return [
            MeanSpeedColumn(style=self.theme.processing_speed) if isinstance(c, ProcessingSpeedColumn) else c
            for c in super().configure_columns(trainer)
        ]

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
