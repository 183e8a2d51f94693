"""A run's steps up to a ready Trainer, all at once, for the commands that need no more (brisk-eval, -predict,
tune, the lab): the config checked, the folders (and, with a model, the room for its checkpoint) checked on the job's
first process, the job's other ranks started. brisk-train takes the same steps one by one (see train.py).
"""

from __future__ import annotations

import lightning as L
from omegaconf import DictConfig

from brisk.run import checks, preflight
from brisk.run.builder import always_on, build_datamodule, build_model, make_trainer
from brisk.utils.ranks import first_process


def build_trainer(cfg: DictConfig, extra_callbacks: list[L.Callback] = ()) -> L.Trainer:
    """A checked Trainer running on all of the job's ranks."""
    checks.validate(cfg)  # before anything is built, loaded or launched
    if first_process():  # the other ranks of a job share what the first one checked
        preflight.folders(cfg)
    return make_trainer(cfg, extra_callbacks)


def build(
    cfg: DictConfig, datamodule: L.LightningDataModule | None = None
) -> tuple[L.Trainer, L.LightningDataModule, L.LightningModule]:
    """Trainer (with the callbacks brisk-train always has), DataModule and model, checked and ready to fit; the data
    is checked as it is read, at setup. `datamodule`: one already made from this config (the lab reuses what it has
    read), else a new one."""
    checks.validate(cfg)  # before anything is built, loaded or launched
    datamodule = datamodule if datamodule is not None else build_datamodule(cfg)
    model = build_model(cfg, datamodule)
    if first_process():  # the other ranks of a job share what the first one checked
        preflight.folders(cfg)
        preflight.room(cfg, model)
    trainer = make_trainer(cfg, always_on(cfg.get("target_acc")))
    return trainer, datamodule, model
