"""The classifier for a composed config, sized by its data: the DataModule names the classes it predicts."""

from __future__ import annotations

import lightning as L
import torch
from omegaconf import DictConfig

from brisk import fastloop
from brisk.models.classifier import ImageClassifier
from brisk.registry import DATASETS, check_arguments, construct
from brisk.utils.config import plain


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    """The DataModule `data.type` names, with the rest of `data` as its arguments."""
    return DATASETS.build(plain(cfg.data))


def build_model(cfg: DictConfig, datamodule: L.LightningDataModule | None = None) -> L.LightningModule:
    """The model for the data: its classes come from the DataModule (built from cfg.data if not given)."""
    datamodule = datamodule if datamodule is not None else build_datamodule(cfg)
    # The classifier builds its own net and optimizer by name, and keeps their configs as hparams.
    knobs = plain(cfg.model)
    given = {"optimizer": cfg.optimizer, "scheduler": cfg.get("scheduler"), "class_names": datamodule.class_names}
    check_arguments(ImageClassifier, knobs, "model", given)
    model = construct(ImageClassifier, "model", **knobs, **given)
    # A net trained elsewhere (TimmNet with weights) expects inputs normalized as in its training: those statistics
    # replace the data's, here rather than in a second key, so the checkpoint, predict and export hold the same ones.
    stats = getattr(model.net, "input_stats", None)
    if stats is not None and hasattr(datamodule, "mean"):
        datamodule.mean, datamodule.std = (list(s) for s in stats)
    if cfg.get("fast_loop", True):  # brisk.fastloop's per-step cuts; false: the module as Lightning runs it
        fastloop.model(model)
    if datamodule.hparams.get("channels_last"):  # the DataModule delivers channels_last inputs: match them
        model.to(memory_format=torch.channels_last)
    return model
