"""Checks of the filesystem and the data before a run starts, after the config checks (brisk.run.checks).

Each names the path or key and the fix, so a run is refused in its first seconds rather than after
an epoch (an unwritable checkpoints/ folder), after the whole fit (a damaged test split), or with
a traceback (an unreadable data folder, a batch larger than the training split).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from brisk.errors import BriskError
from brisk.models.build import build_model
from brisk.utils.files import creatable, nearest_existing

# Optimizer state per parameter in a checkpoint: Adam/AdamW keep two moments, SGD with momentum one.
OPTIMIZER_STATES = 2


def check(cfg: DictConfig, datamodule: L.LightningDataModule | None) -> None:
    """Outputs writable, room for a checkpoint, data readable and big enough (`datamodule`: the run's, if built)."""
    folders = checkpoint_dirs(cfg)
    if OmegaConf.select(cfg, "paths.output_dir") is not None:
        creatable(Path(str(cfg.paths.output_dir)), "hydra.run.dir")
    for key, folder in folders.items():
        creatable(folder, key)
    if "model" in cfg and folders:
        disk_space(folders, checkpoint_bytes(cfg, datamodule))
    if datamodule is not None:
        data(cfg, datamodule)


def checkpoint_dirs(cfg: DictConfig) -> dict[str, Path]:
    """The folders the checkpoint callbacks write to, by config key."""
    found = {}
    for name, callback in (cfg.get("callbacks") or {}).items():
        if isinstance(callback, DictConfig) and callback.get("dirpath"):
            found[f"callbacks.{name}.dirpath"] = Path(str(callback.dirpath))
    return found


def checkpoint_bytes(cfg: DictConfig, datamodule: L.LightningDataModule | None) -> int:
    """About how big one checkpoint of this model is: weights, buffers and optimizer state.

    The model is built on the meta device, which allocates nothing, so even a model too big for this
    machine is measured in milliseconds."""
    with torch.device("meta"):
        module = build_model(cfg, datamodule)  # its data, not a copy: it sizes the head
    state = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    return state + OPTIMIZER_STATES * params


def disk_space(folders: dict[str, Path], needed: int) -> None:
    """A checkpoint is written beside the previous one and then renamed over it: each folder needs room for one."""
    for key, folder in folders.items():
        free = shutil.disk_usage(nearest_existing(folder)).free
        if free < needed:
            raise BriskError(
                f"{key}={folder}: {free / 1e9:.2f} GB free, but one checkpoint of this model needs about "
                f"{needed / 1e9:.2f} GB. Free some space, or put the run on a bigger disk (hydra.run.dir=<folder>)."
            )


def readable_folder(path: Path, key: str) -> None:
    """A folder that exists must be one this process can list and read. One that does not exist is fine:
    brisk downloads or generates the data there."""
    try:
        mode = os.stat(path).st_mode
    except NotADirectoryError:
        return  # a part of the path is a file: creating the folder fails with its own message (cifar_files)
    except FileNotFoundError:
        if os.path.islink(path):
            raise BriskError(f"{key}={path} is a symbolic link to nothing. Set {key} to a folder.") from None
        return
    except OSError as e:  # a symbolic link loop, a path through a file, no permission on a parent
        raise BriskError(f"{key}={path}: cannot be read ({e.strerror}). Set {key} to a folder you can read.") from None
    if not stat.S_ISDIR(mode):
        raise BriskError(f"{key}={path} is a file, not a folder. Set {key} to the folder that holds the data.")
    kwargs = {"effective_ids": True} if os.access in os.supports_effective_ids else {}
    if not os.access(path, os.R_OK | os.X_OK, **kwargs):
        raise BriskError(permission_denied(path, key))


def permission_denied(path: Path | str, key: str) -> str:
    return (
        f"{key}: permission denied on {path}. Give your user read access (e.g. chmod -R u+rX {path}), "
        f"or set {key} to a copy you can read."
    )


def data(cfg: DictConfig, datamodule: L.LightningDataModule) -> None:
    """Read the splits now, as the run would, and check the batch against the training split.

    The DataModule keeps what it read, so the fit and the test that follow do not read it again."""
    root = OmegaConf.select(cfg, "data.root")
    if root is not None:
        readable_folder(Path(str(root)), "data.root")
    try:
        datamodule.prepare_data()
        datamodule.setup("fit")
        datamodule.setup("test")  # a damaged test split is found now, not after the whole fit
    except PermissionError as e:
        raise BriskError(permission_denied(e.filename, "data.root")) from None
    except OSError as e:
        raise BriskError(f"data.root: cannot read {e.filename} ({e.strerror}). Check the path and the disk.") from None
    augment_sizes(cfg, datamodule.image_size)
    train = getattr(datamodule, "splits", {}).get("train")
    batch = OmegaConf.select(cfg, "data.batch_size")
    if train is not None and isinstance(batch, int) and batch > len(train[1]):
        val = OmegaConf.select(cfg, "data.val_size")
        raise BriskError(
            f"data.batch_size={batch} is larger than the training split: {len(train[1])} images (the train split "
            f"minus data.val_size={val}). Use data.batch_size={len(train[1])} or less, or a smaller data.val_size."
        )


def augment_sizes(cfg: DictConfig, side: int) -> None:
    """Padding and cutout are sized in pixels of the images the data delivers (32 for CIFAR-10, data.image_size
    for an image folder): more than the image's side is a typo, and would train on crops of nothing but padding."""
    for key in ("crop_pad", "cutout_size"):
        value = OmegaConf.select(cfg, f"data.augment.{key}")
        if isinstance(value, int) and value > side:
            raise BriskError(
                f"data.augment.{key}={value} is larger than the images, which are {side}x{side} pixels. Use at most "
                f"data.augment.{key}={side}, or train on larger images."
            )
