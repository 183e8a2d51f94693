"""The end of a run's loggers that Lightning leaves open."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import WandbLogger


def finish(trainer: L.Trainer) -> None:
    """End the job's wandb run now, the way wandb documents for several runs in one process (`run.finish()`).

    Lightning's WandbLogger leaves it open until the process exits: wandb's closing lines then came after the run
    directory, which must be the last line printed, and the next job of a sweep run in the same process logged
    into the same wandb run (WandbLogger reuses an open one). On ranks other than 0 the experiment is Lightning's
    no-op stand-in."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.finish()
