"""The run's folders can be made, and a checkpoint of the model it built fits there: refused in the first seconds,
not at the first save. The data is checked as it is read (brisk.data.checks)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from brisk.errors import BriskError
from brisk.utils.files import creatable, nearest_existing


def checkpoint_dirs(cfg: DictConfig) -> dict[str, Path]:
    """The folders the checkpoint callbacks write to, by config key."""
    dirs = {n: c.get("dirpath") for n, c in (cfg.get("callbacks") or {}).items() if isinstance(c, DictConfig)}
    return {f"callbacks.{n}.dirpath": Path(str(d)) for n, d in dirs.items() if d}


def folders(cfg: DictConfig) -> None:
    """hydra.run.dir and every checkpoint folder can be made and written (nothing is made here)."""
    if OmegaConf.select(cfg, "paths.output_dir") is not None:
        creatable(Path(str(cfg.paths.output_dir)), "hydra.run.dir")
    for key, folder in checkpoint_dirs(cfg).items():
        creatable(folder, key)


def room(cfg: DictConfig, model: torch.nn.Module) -> None:
    """A checkpoint is written beside the previous one, then renamed over it: each folder needs room for one."""
    needed = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    needed += 2 * sum(p.numel() * p.element_size() for p in model.parameters())  # Adam's 2 moments, SGD's 1
    for key, folder in checkpoint_dirs(cfg).items():
        if (free := shutil.disk_usage(nearest_existing(folder)).free) < needed:
            raise BriskError(
                f"{key}={folder}: {free / 1e9:.2f} GB free, but one checkpoint of this model needs about "
                f"{needed / 1e9:.2f} GB. Free some space, or put the run on a bigger disk (hydra.run.dir=<folder>)."
            )
