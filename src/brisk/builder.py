"""The one builder: a composed config in, the Trainer, DataModule and LightningModule out.

train, evaluate and bench all go through here, so no instantiation code is written twice.
"""

from __future__ import annotations

import functools

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from brisk import checks, compat, distributed, preflight, rundir
from brisk.callbacks import DivergenceGuard, RankSeed, ResumeState, SigtermCheckpoint, SpeedMeter, StartupClock
from brisk.checkpoint_io import SafeCheckpointIO


def resolve_precision(requested: str | int, accelerator: str) -> str:
    """`auto` -> bf16-mixed on GPUs that support it, 16-mixed on older GPUs, 32 elsewhere.

    Other values pass unchanged: checks.validate has already refused unknown ones."""
    requested = str(requested)
    if requested != "auto":
        return requested
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "32-true"


def _instantiate_all(group: DictConfig | None) -> list:
    """Instantiate every entry of a name -> config mapping (callbacks, loggers); null entries are off."""
    return [instantiate(c) for c in (group or {}).values() if c is not None]


def build_trainer(
    cfg: DictConfig, extra_callbacks: list[L.Callback] = (), datamodule: L.LightningDataModule | None = None
) -> L.Trainer:
    checks.validate(cfg)  # before anything is built, loaded or launched
    if rundir.first_process():  # the other ranks of a job share what the first one checked
        model = (
            functools.partial(build_model, datamodule=datamodule) if "model" in cfg else None
        )  # its data, not a copy
        preflight.check(cfg, datamodule, model)
    trainer = _trainer(cfg, extra_callbacks)
    if distributed.needs_launch(trainer):
        # brisk starts this node's other ranks itself (see brisk.distributed for why), then builds the
        # Trainer again: with LOCAL_RANK set, Lightning sees processes that were created for it.
        distributed.launch(trainer)
        trainer = _trainer(cfg, extra_callbacks)
    return trainer


def _trainer(cfg: DictConfig, extra_callbacks) -> L.Trainer:
    precision = resolve_precision(cfg.trainer.precision, str(cfg.trainer.accelerator))
    callbacks = [*_instantiate_all(cfg.get("callbacks")), *extra_callbacks]
    # Checkpoints are written by temp file + rename and always read with weights_only=True.
    plugins = [SafeCheckpointIO(), *instantiate(cfg.trainer.get("plugins") or [])]
    trainer = instantiate(
        cfg.trainer,
        precision=precision,
        callbacks=callbacks,
        logger=_instantiate_all(cfg.get("logger")),
        plugins=plugins,
    )
    for callback in trainer.callbacks:  # with those Lightning adds itself (the model summary)
        compat.skip_empty_hooks(callback)
    return trainer


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    return instantiate(cfg.data)


def build_model(cfg: DictConfig, datamodule: L.LightningDataModule | None = None) -> L.LightningModule:
    """The model for the data: its classes come from the DataModule (built from cfg.data if not given)."""
    datamodule = datamodule if datamodule is not None else build_datamodule(cfg)
    # _recursive_=False: the classifier builds its own net and optimizer, and keeps their configs as hparams.
    model = instantiate(
        cfg.model,
        optimizer=cfg.optimizer,
        scheduler=cfg.get("scheduler"),
        class_names=datamodule.class_names,
        _recursive_=False,
    )
    if datamodule.hparams.get("channels_last"):  # the DataModule delivers channels_last inputs: match them
        model.to(memory_format=torch.channels_last)
    return model


def always_on() -> list[L.Callback]:
    """Whatever the callbacks group says: the measurements in summary.json (find them in trainer.callbacks),
    exact resume, each rank's own augmentation draws, NaN stop, checkpoint on SIGTERM."""
    return [SpeedMeter(), StartupClock(), ResumeState(), RankSeed(), DivergenceGuard(), SigtermCheckpoint()]


def build(cfg: DictConfig) -> tuple[L.Trainer, L.LightningDataModule, L.LightningModule]:
    datamodule = build_datamodule(cfg)  # first: the pre-flight checks read the data through it
    return build_trainer(cfg, always_on(), datamodule), datamodule, build_model(cfg, datamodule)
