"""The one builder: a composed config in, the Trainer, DataModule and LightningModule out.

train, evaluate and bench all go through here, so no instantiation code is written twice.
"""

from __future__ import annotations

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from brisk.callbacks import SpeedMeter
from brisk.errors import BriskError

PRECISIONS = (
    "auto",
    "32",
    "32-true",
    "64",
    "64-true",
    "16-mixed",
    "bf16-mixed",
    "16-true",
    "bf16-true",
    "transformer-engine",
)


def resolve_precision(requested: str | int, accelerator: str) -> str:
    """`auto` -> bf16-mixed on GPUs that support it, 16-mixed on older GPUs, 32 elsewhere."""
    requested = str(requested)
    if requested not in PRECISIONS:
        raise BriskError(f"trainer.precision={requested} is unknown. Choose one of: {', '.join(PRECISIONS)}.")
    if requested != "auto":
        return requested
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "32-true"


def _instantiate_all(group: DictConfig | None) -> list:
    """Instantiate every entry of a name -> config mapping (callbacks, loggers); null entries are off."""
    return [instantiate(c) for c in (group or {}).values() if c is not None]


def check_hardware(trainer: DictConfig) -> None:
    """Stop before anything is built if the config asks for hardware that is not here."""
    accelerator, strategy = str(trainer.accelerator), trainer.strategy
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise BriskError(
            f"trainer.accelerator={accelerator} but no CUDA GPU is visible. "
            "Use trainer=cpu or trainer.accelerator=auto."
        )
    name = str(strategy.get("_target_", "") if isinstance(strategy, DictConfig) else strategy).lower()
    if ("fsdp" in name or "deepspeed" in name) and (accelerator == "cpu" or not torch.cuda.is_available()):
        raise BriskError(
            f"trainer.strategy={strategy} needs CUDA GPUs, and none are available here. "
            "Use strategy=ddp (or ddp_spawn) on CPU."
        )


def build_trainer(cfg: DictConfig, extra_callbacks: list[L.Callback] = ()) -> L.Trainer:
    check_hardware(cfg.trainer)
    precision = resolve_precision(cfg.trainer.precision, str(cfg.trainer.accelerator))
    callbacks = [*_instantiate_all(cfg.get("callbacks")), *extra_callbacks]
    return instantiate(
        cfg.trainer, precision=precision, callbacks=callbacks, logger=_instantiate_all(cfg.get("logger"))
    )


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    return instantiate(cfg.data)


def build_model(cfg: DictConfig) -> L.LightningModule:
    # _recursive_=False: the classifier builds its own net and optimizer, and keeps their configs as hparams.
    return instantiate(cfg.model, optimizer=cfg.optimizer, scheduler=cfg.get("scheduler"), _recursive_=False)


def build(cfg: DictConfig) -> tuple[L.Trainer, L.LightningDataModule, L.LightningModule, SpeedMeter]:
    speed = SpeedMeter()
    return build_trainer(cfg, [speed]), build_datamodule(cfg), build_model(cfg), speed
