"""The loggers and profilers conf/ picks by name, and the end of a run's loggers that Lightning leaves open."""

from __future__ import annotations

import lightning as L
from lightning.pytorch import loggers, profilers
from lightning.pytorch.loggers import WandbLogger

from brisk.registry import LOGGERS, PROFILERS

# Lightning's own; each imports its package (mlflow, wandb, tensorboard) only when a run builds it.
LOGGERS.register("csv", loggers.CSVLogger)
LOGGERS.register("tensorboard", loggers.TensorBoardLogger)
LOGGERS.register("mlflow", loggers.MLFlowLogger)
LOGGERS.register("wandb", WandbLogger)
PROFILERS.register("simple", profilers.SimpleProfiler)
PROFILERS.register("advanced", profilers.AdvancedProfiler)
PROFILERS.register("pytorch", profilers.PyTorchProfiler)


def finish(trainer: L.Trainer) -> None:
    """End the job's wandb run now, the way wandb documents for several runs in one process (`run.finish()`).

    Lightning's WandbLogger leaves it open until the process exits: wandb's closing lines then came after the run
    directory, which must be the last line printed, and the next job of a sweep run in the same process logged
    into the same wandb run (WandbLogger reuses an open one). On ranks other than 0 the experiment is Lightning's
    no-op stand-in."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.finish()
