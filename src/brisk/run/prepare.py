"""A run's steps up to a ready Trainer, all at once, for the commands that need no more (brisk-eval, -predict,
tune, the lab): the config checked, the disk and data checked on the job's first process, the job's other ranks
started. brisk-train takes the same steps one by one, with its own in between (see train.py).
"""

from __future__ import annotations

import lightning as L
from omegaconf import DictConfig

from brisk.run import checks, launch, preflight
from brisk.run.builder import always_on, build_datamodule, build_model, make_trainer
from brisk.utils.ranks import first_process


def build_trainer(
    cfg: DictConfig, extra_callbacks: list[L.Callback] = (), datamodule: L.LightningDataModule | None = None
) -> L.Trainer:
    """A checked Trainer running on all of the job's ranks. `datamodule`, if given, is the one pre-flighted."""
    checks.validate(cfg)  # before anything is built, loaded or launched
    if first_process():  # the other ranks of a job share what the first one checked
        preflight.check(cfg, datamodule)
    return launch.on_all_ranks(lambda: make_trainer(cfg, extra_callbacks))


def build(
    cfg: DictConfig, datamodule: L.LightningDataModule | None = None
) -> tuple[L.Trainer, L.LightningDataModule, L.LightningModule]:
    """Trainer (with the callbacks brisk-train always has), DataModule and model, checked and ready to fit.
    `datamodule`: one already made from this config (the lab reuses what it has read), else a new one."""
    if datamodule is None:
        datamodule = build_datamodule(cfg)  # first: the pre-flight checks read the data through it
    return build_trainer(cfg, always_on(cfg.get("target_acc")), datamodule), datamodule, build_model(cfg, datamodule)
