"""The loggers and profilers conf/ picks by name, the checks a logger gets as it is built, and the end of a run's
loggers that Lightning leaves open."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch import loggers, profilers
from lightning.pytorch.loggers import WandbLogger

from brisk.registry import LOGGERS, PROFILERS
from brisk.utils.files import creatable

# Lightning's own; each imports its package (mlflow, wandb, tensorboard) only when a run builds it.
LOGGERS.register("csv", loggers.CSVLogger)
LOGGERS.register("tensorboard", loggers.TensorBoardLogger)
LOGGERS.register("mlflow", loggers.MLFlowLogger)
LOGGERS.register("wandb", WandbLogger)
PROFILERS.register("simple", profilers.SimpleProfiler)
PROFILERS.register("advanced", profilers.AdvancedProfiler)
PROFILERS.register("pytorch", profilers.PyTorchProfiler)


def check(key: str, spec: Mapping[str, Any]) -> None:
    """Refuse, as the logger at `key` is built, what would fail it only inside the fit, in a traceback: a folder it
    cannot make or write (its save_dir, or wandb's dir), wandb online without a key, an mlflow tracking server that
    does not answer or an mlflow store that is not one. A new mlflow sqlite store is made here, once (mlflow_store)."""
    for name in ("save_dir", "dir"):
        if spec.get(name) is not None:
            # made and written to by the logger only once fit sets up: checked without making it (brisk.utils.files)
            creatable(Path(os.fspath(spec[name])).expanduser(), f"{key}.{name}")
    kind = spec.get("type")
    if kind in LOGGERS and issubclass(LOGGERS.get(kind), WandbLogger):
        from brisk.run import wandb_key  # only where wandb logs

        wandb_key.check(key, spec)
    if kind in LOGGERS and issubclass(LOGGERS.get(kind), loggers.MLFlowLogger):
        from brisk.run import mlflow_store  # only where mlflow logs

        mlflow_store.check(key, spec)


def finish(trainer: L.Trainer) -> None:
    """End the job's wandb run now, the way wandb documents for several runs in one process (`run.finish()`).

    Lightning's WandbLogger leaves it open until the process exits: wandb's closing lines then came after the run
    directory, which must be the last line printed, and the next job of a sweep run in the same process logged
    into the same wandb run (WandbLogger reuses an open one). On ranks other than 0 the experiment is Lightning's
    no-op stand-in."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.finish()
