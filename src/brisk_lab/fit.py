"""One measured brisk fit: the Trainer, DataModule and model that brisk-train builds, plus a StepClock."""

from __future__ import annotations

import copy
import time

import lightning as L
from omegaconf import DictConfig, OmegaConf, open_dict

from brisk import build, build_datamodule
from brisk_lab import nets  # noqa: F401  registers the lab's NilNet as model.net.type=nil
from brisk_lab.clock import StepClock


class DataCache:
    """DataModules by data config and seed: fits that read the same split share it (reading CIFAR-10 takes ~1 s,
    the 50,000 generated images 1.2 s). The seed is part of the key because a DataModule orders its epochs and
    draws its flip phases by the seed it was made under (brisk.data.base: order_seed)."""

    def __init__(self) -> None:
        self._modules: dict[tuple[str, int], L.LightningDataModule] = {}

    def get(self, cfg: DictConfig) -> L.LightningDataModule:
        """The DataModule for `cfg`, made on first use: call it after seeding with cfg.seed, as the lab's fits do."""
        key = (OmegaConf.to_yaml(cfg.data, resolve=True), int(cfg.seed))
        if key not in self._modules:
            self._modules[key] = build_datamodule(cfg)
        return self._modules[key]


def with_clock(cfg: DictConfig, warmup: int, steps: int, count_calls: bool = False) -> DictConfig:
    """The config with the lab's clock among its callbacks, so the builder makes it like any other."""
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        if cfg.get("callbacks") is None:
            cfg.callbacks = {}
        cfg.callbacks.lab_clock = {
            "type": "lab_clock",  # StepClock
            "warmup": warmup,
            "steps": steps,
            "count_calls": count_calls,
        }
    return cfg


def timed_fit(trainer: L.Trainer, datamodule: L.LightningDataModule, model: L.LightningModule) -> dict:
    """Fit until the StepClock among the trainer's callbacks has its batches; its figures and the fit's setup."""
    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule)
    fit_s = time.perf_counter() - start
    clock = next(c for c in trainer.callbacks if isinstance(c, StepClock))
    result = dict(clock.result)
    per_epoch = trainer.num_training_batches  # after limit_train_batches: the data-scale lever shows here
    result.update(
        fit_s=fit_s,
        fixed_s=fit_s - result["loop_s"],  # Lightning's setup and teardown around the steps
        epoch_batches=per_epoch,
        epoch_s=per_epoch * result["batch_s"],
        precision=trainer.precision,
        world_size=trainer.world_size,
    )
    return result


def measure_fit(cfg: DictConfig, warmup: int, steps: int, data: DataCache | None = None) -> dict:
    """Fit until the clock has `warmup` + `steps` batches; return the clock's figures and the fit's setup."""
    cfg = with_clock(cfg, warmup, steps)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    # A cached DataModule is pre-flighted again, without a read: it keeps the splits it holds.
    return timed_fit(*build(cfg, data.get(cfg) if data is not None else None))
