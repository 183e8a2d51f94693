"""ProgressBar: Lightning's RichProgressBar, redrawn every `refresh_rate` training steps, its speed in images/s.

Why not Lightning's class as it is: in lightning 2.6.6, RichProgressBar's `refresh_rate` is how many times a second
its drawing thread may redraw. Its on_train_batch_end still runs in full after every batch: it updates the rich task
and reads the progress-bar metrics (`trainer.progress_bar_metrics` walks the step's logged results and converts each
`prog_bar` tensor to a number, a host sync on a GPU once a step logs one). On the default path at nil compute that
is 2,282 Python calls a step over the plain loop against this bar's 2,156 (the speed lab's call budget): 6%
over the 2,150 of the bar before it, where tests/project/test_bench.py allows 3%. So between updates this bar skips
that hook, reading `refresh_rate` as steps, as TQDMProgressBar does (the drawing thread still gets it as redraws a
second); the bar still moves every `refresh_rate` steps and at the end of each epoch.

Two of Lightning's fields are replaced. Its speed column is rich's estimate in batches a second, which needs two
redraws within 30 s and so read 0.00it/s on epochs of fewer than 2 x refresh_rate steps: this bar shows the mean
since the epoch began, in images a second on the training bar (all ranks; the evaluation bars keep batches a
second). `v_num`, the logger's version, read "v_num: 0.000" (the bar formats every value as a float): the run
directory already names the run, so the bar leaves it out.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import ProcessingSpeedColumn
from rich.text import Text

from brisk.registry import CALLBACKS


class MeanSpeedColumn(ProcessingSpeedColumn):
    """Images a second on the training bar, batches a second on the others: the mean since the bar started, up to
    the moment it finished."""

    def __init__(self, bar: ProgressBar, style) -> None:
        super().__init__(style)
        self.bar = bar

    def render(self, task) -> Text:
        seconds = task.finished_time if task.finished_time is not None else task.elapsed
        if not seconds:
            return Text("")
        if task.id == self.bar.train_progress_bar_id:
            images = self.bar.epoch_images * self.bar.trainer.world_size
            return Text(f"{images / seconds:,.0f} img/s", style=self.style)
        return Text(f"{task.completed / seconds:.2f}it/s", style=self.style)


@CALLBACKS.register("progress_bar")
class ProgressBar(RichProgressBar):
    epoch_images = 0  # this rank's training images since the epoch began (a Python int, counted every step)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.epoch_images = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.epoch_images += len(batch[1])
        done, every = batch_idx + 1, self.refresh_rate  # 0: no bar (Lightning's hook then updates nothing)
        if every and (done % every == 0 or done >= self.total_train_batches):
            if self.train_progress_bar_id is None:  # resumed mid-epoch: no on_train_epoch_start, the bar starts now
                self.epoch_images = 0
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def configure_columns(self, trainer) -> list:
        return [
            MeanSpeedColumn(self, style=self.theme.processing_speed) if isinstance(c, ProcessingSpeedColumn) else c
            for c in super().configure_columns(trainer)
        ]

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
