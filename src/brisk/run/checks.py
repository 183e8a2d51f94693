"""Config checks that run before any data is read or any process is started: the values themselves, and what
they ask of this machine (the devices it has, a checkpoint file that must exist).

Each check names the key at fault and the fix. Every entry point calls `validate` (or `values`) first thing, so a
bad value costs a second, not a dataset load, a DDP launch, or a crash deep inside Lightning. What needs the data
or the disk is brisk.run.preflight; what needs the checkpoint's content, brisk.run.resume.
"""

from __future__ import annotations

import math
import os

import torch
from omegaconf import DictConfig, OmegaConf

from brisk import registry as registry_
from brisk.checkpoints import io, paths
from brisk.data.augment_ops import Augmentation
from brisk.errors import BriskError
from brisk.run import devices, precision
from brisk.run.builder import check_always_on
from brisk.utils.config import plain

INT, NUM = "a whole number", "a number"
_ABSENT = object()
# key: (kind, test, what the test asks, other values allowed). A key absent from the config (another
# model, another dataset) is skipped.
VALUES = {
    "seed": (INT, lambda v: 0 <= v < 2**32, "in 0..2**32-1", ()),  # the range Lightning's seed_everything takes
    "trainer.max_epochs": (INT, lambda v: v >= 1, ">= 1", (-1, None)),  # 0 would test an untrained net, exit 0
    "trainer.max_steps": (INT, lambda v: v >= 1, ">= 1", (-1, None)),
    "trainer.log_every_n_steps": (INT, lambda v: v >= 1, ">= 1", ()),
    "trainer.check_val_every_n_epoch": (INT, lambda v: v >= 1, ">= 1", (None,)),
    # a share of the epoch's batches, or a number of them: Lightning divides by it, and 0 fails at the first step
    "trainer.val_check_interval": (NUM, lambda v: v > 0, "> 0", (None,)),
    "trainer.gradient_clip_val": (NUM, lambda v: v >= 0, ">= 0", (None,)),
    "trainer.limit_train_batches": (NUM, lambda v: v > 0, "> 0", (None,)),  # 0 batches would train nothing
    "trainer.limit_val_batches": (NUM, lambda v: v >= 0, ">= 0", (None,)),
    # 0 would test nothing: brisk-eval's eval.json and summary.json's test metrics empty, and exit 0
    "trainer.limit_test_batches": (NUM, lambda v: v > 0, "> 0", (None,)),
}


def validate(cfg: DictConfig) -> None:
    """Raise BriskError for the first bad value in a composed train or eval config."""
    complete(cfg)
    values(cfg)
    if "always_on" in cfg:  # conf/train.yaml's list; eval's config has none
        check_always_on(cfg.always_on)
    Augmentation(plain(OmegaConf.select(cfg, "data.augment")))  # every key a registered op, with values it takes
    types(cfg)
    trainer = cfg.trainer
    precision.name(trainer.precision)
    if "accumulate_grad_batches" in trainer:
        accumulation(trainer.accumulate_grad_batches, cfg.get("callbacks"))
    hardware(trainer)
    world = devices.device_count(trainer) * devices.num_nodes(trainer)
    batch_split(cfg.data, world)
    checkpoint_exists(cfg.get("ckpt_path"))


def complete(cfg: DictConfig) -> None:
    """No key left at ??? (`data.batch_size=???` on the command line): OmegaConf's MissingMandatoryValue names it,
    and brisk.cli says it in one line. A reader that takes the config's plain values would get the text '???'."""
    OmegaConf.to_container(cfg, throw_on_missing=True)


def types(cfg: DictConfig) -> None:
    """Every class the config picks is a registered name, given only arguments it takes: refused here, before
    anything is built or the run directory is kept, rather than when fit reaches the optimizer."""
    for registry in registry_.SINGLE:
        spec = OmegaConf.select(cfg, registry.key)
        if spec is not None:  # interval: how often Lightning steps a scheduler, not its argument
            registry.check({k: v for k, v in plain(spec).items() if k != "interval"})
    for registry in registry_.GROUPS:
        for name, spec in (cfg.get(registry.key) or {}).items():
            if spec is not None:
                registry.check(plain(spec), f"{registry.key}.{name}")


def values(cfg: DictConfig) -> None:
    """Types and ranges of the keys in VALUES, which every entry point has: a wrong one would crash deep in a
    library, or run wrong. The entry points' own values are checked where each takes them."""
    for key, (kind, test, wanted, allowed) in VALUES.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is _ABSENT or (value in allowed and not isinstance(value, bool)):
            continue
        number = isinstance(value, int if kind == INT else (int, float)) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and test(value)):
            also = f" (or {', '.join('null' if a is None else str(a) for a in allowed)})" if allowed else ""
            raise BriskError(f"{key}={value!r} must be {' '.join(filter(None, (kind, wanted)))}{also}.", key)


def accumulation(value, callbacks: DictConfig | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BriskError(
            f"trainer.accumulate_grad_batches={value} (the accumulation group) must be a whole number >= 1. "
            "Use accumulation=1 for none, or accumulation=2|4|8.",
            "trainer.accumulate_grad_batches",
        )
    schedule = ((callbacks or {}).get("accumulation") or {}).get("scheduling") or {}
    for epoch, factor in schedule.items():
        if not isinstance(factor, int) or factor < 1:
            raise BriskError(
                f"callbacks.accumulation.scheduling.{epoch}={factor} must be a whole number >= 1 (batches per step).",
                f"callbacks.accumulation.scheduling.{epoch}",
            )


def hardware(trainer: DictConfig) -> None:
    """Stop if the config asks for hardware that is not here."""
    accelerator, strategy = str(trainer.accelerator), trainer.strategy
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise BriskError(
            f"trainer.accelerator={accelerator} but no CUDA GPU is visible. "
            "Use trainer=cpu or trainer.accelerator=auto.",
            "trainer.accelerator",
        )
    if trainer.get("sync_batchnorm") and devices.accelerator(trainer) != "cuda":
        raise BriskError(
            "trainer.sync_batchnorm=true needs CUDA GPUs (SyncBatchNorm has no CPU kernel). "
            "Drop it on CPU: see the README's BatchNorm notes.",
            "trainer.sync_batchnorm",
        )
    name = str(strategy.get("_target_", "") if isinstance(strategy, DictConfig) else strategy).lower()
    if ("fsdp" in name or "deepspeed" in name) and devices.accelerator(trainer) != "cuda":
        raise BriskError(
            f"trainer.strategy={strategy} needs CUDA GPUs, and none are available here. "
            "Use strategy=ddp (or ddp_spawn) on CPU.",
            "trainer.strategy",
        )


def batch_split(data: DictConfig, world: int) -> None:
    """The global batches are split evenly across all processes (devices x nodes)."""
    for key in ("batch_size", "eval_batch_size"):
        size = data.get(key)
        if size is None:
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise BriskError(f"data.{key}={size} must be a whole number >= 1.", f"data.{key}")
        if size % world:
            lower, upper = size // world * world, -(-size // world) * world
            nearest = f"{lower} or {upper}" if lower else str(upper)
            raise BriskError(
                f"data.{key}={size} (the global batch) does not split across {world} processes "
                f"(trainer.devices x trainer.num_nodes). Use a multiple of {world}, e.g. data.{key}={nearest}.",
                f"data.{key}",
            )


def checkpoint_exists(ckpt_path) -> None:
    if ckpt_path is None or str(ckpt_path) in paths.KEYWORDS:
        return
    if not os.path.lexists(str(ckpt_path)):
        raise BriskError(
            f"ckpt_path={ckpt_path}: no such file. Pass the path of a .ckpt (e.g. <run>/checkpoints/last.ckpt), "
            "or ckpt_path=last together with hydra.run.dir=<run>.",
            "ckpt_path",
        )
    io.regular_checkpoint(str(ckpt_path))
