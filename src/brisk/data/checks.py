"""What a DataModule refuses of its data before the first step, each naming its `data.*` key and the fix: a
data.root it cannot read, a batch larger than the training split, padding or cutout larger than the images. An
unreadable folder, caught here, is one line; caught by the reader, a traceback or "delete and download again"."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_only

from brisk.errors import BriskError

log = logging.getLogger("brisk")


def readable_folder(path: str | Path, key: str) -> None:
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


@contextlib.contextmanager
def read_errors() -> Iterator[None]:
    """What the filesystem refuses while the data is fetched or read, as one line naming data.root."""
    try:
        yield
    except PermissionError as e:
        raise BriskError(permission_denied(e.filename, "data.root")) from None
    except OSError as e:
        raise BriskError(f"data.root: cannot read {e.filename} ({e.strerror}). Check the path and the disk.") from None


def batch_fits(batch: int, n_train: int, val_size: int | float) -> None:
    """drop_last trains whole batches only: a batch larger than the training split would train on nothing."""
    if batch > n_train:
        raise BriskError(
            f"data.batch_size={batch} is larger than the training split: {n_train} images (the train split "
            f"minus data.val_size={val_size}). Use data.batch_size={n_train} or less, or a smaller data.val_size."
        )


def augment_fits(augment: dict, side: int) -> None:
    """Padding and cutout are sized in pixels of the images the data delivers (32 for CIFAR-10, data.image_size
    for an image folder): more than the image's side is a typo, and would train on crops of nothing but padding."""
    for key in ("crop_pad", "cutout_size"):
        value = augment.get(key)
        if isinstance(value, int) and value > side:
            raise BriskError(
                f"data.augment.{key}={value} is larger than the images, which are {side}x{side} pixels. Use at most "
                f"data.augment.{key}={side}, or train on larger images."
            )


@rank_zero_only  # by the job's rank, known before a Trainer is: the DataModule is set up before one is built
def say_dropped(n: int, global_batch: int, world: int) -> None:
    """One line when drop_last leaves more than a tenth of the train split out of every epoch: a 900-image folder
    at the default batch of 512 trained on 512 images an epoch, and said nothing. A batch larger than the split is
    refused where training batches it (batch_fits)."""
    dropped = n % global_batch
    if global_batch <= n and dropped > n / 10:
        # Fewer than one batch is dropped, so a batch of at most a tenth of the images drops at most a tenth.
        fix = max(world, (1 << max(n // 10, 1).bit_length() - 1) // world * world)
        log.warning(
            f"data.batch_size={global_batch} leaves {dropped} of the {n} training images out of every epoch "
            f"(drop_last trains whole batches only): use a smaller data.batch_size, e.g. data.batch_size={fix}."
        )
