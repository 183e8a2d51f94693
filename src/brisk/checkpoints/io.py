"""Checkpoint files: never half-written, and never able to run code when loaded.

lightning 2.6.6's TorchCheckpointIO writes a temporary file in the system temp folder and moves
it over the target. That move is a rename only when the temp folder and the checkpoints share a
filesystem; otherwise (/tmp on tmpfs, checkpoints on a scratch or network disk) it copies over the
target in place, and a run killed during the copy leaves a truncated last.ckpt. It also never
fsyncs, and a killed write leaves a checkpoint-sized file in /tmp. SafeCheckpointIO writes the
temporary file beside the target, fsyncs it and renames it: a reader sees the old checkpoint or
the new one, never a mix. Loading always uses weights_only=True.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from brisk.errors import BriskError
from brisk.utils import run_files
from brisk.utils.files import published


def regular_checkpoint(path: str | os.PathLike) -> None:
    """Refuse, reading nothing, a `ckpt_path` that is no regular file: a folder given for the checkpoint in it (a run
    directory: the .ckpt files it holds are named), a FIFO, on which torch.load would wait forever, a device."""
    if os.path.isdir(path):
        found = sorted(Path(path).glob("*.ckpt")) or sorted(Path(path).glob("checkpoints/*.ckpt"))
        example = next((f for f in found if f.name == "last.ckpt"), found[0] if found else None)
        raise BriskError(
            f"ckpt_path={path} is a folder. Pass a checkpoint file"
            + (f", e.g. ckpt_path={example} ({len(found)} .ckpt there)." if example else ": it holds no .ckpt."),
            "ckpt_path",
        )
    run_files.regular(path)


@contextlib.contextmanager
def readable(path: str | os.PathLike) -> Iterator[None]:
    """Turn torch.load's failures on `path` into one BriskError that names the file and the fix.

    Only torch.load's own errors are translated; anything else (a bug, out of memory) passes unchanged. Only a
    regular file is opened: torch.load would wait forever on a FIFO and read a link to /dev/zero without end.
    """
    if os.path.lexists(path):  # a missing file is FileNotFoundError below, with its own line
        regular_checkpoint(path)
    try:
        yield
    except FileNotFoundError:
        raise BriskError(f"ckpt_path={path}: no such file. Pass the path of a .ckpt brisk wrote.") from None
    except RecursionError:  # a crafted pickle nests containers deeper than the reader can follow
        raise BriskError(
            f"{path}: refused to load: it nests containers deeper than any checkpoint brisk writes. Use a checkpoint "
            "written by brisk-train."
        ) from None
    except OSError as e:  # a truncated archive makes torch's zip reader fail with EINVAL
        raise BriskError(
            f"{path}: cannot be read as a checkpoint ({e.strerror or e}): it is truncated, corrupt or unreadable. "
            "Resume from another checkpoint in the same folder, or start the run again."
        ) from None
    # The legacy (non-zip) reader fails on junk in many ways: KeyError, IndexError, UnicodeDecodeError (a
    # ValueError), struct.error, TypeError, AttributeError; each call site wraps one torch.load.
    except (
        pickle.UnpicklingError,
        EOFError,
        RuntimeError,
        KeyError,
        ValueError,
        TypeError,
        IndexError,
        AttributeError,
        struct.error,
    ) as e:
        text = str(e)
        # torch 2.14 names the object as "Unsupported global: GLOBAL x.y was not an allowed global", or for a
        # blocked module (os, posix, subprocess ...) "unsupported GLOBAL x.y whose module x is blocked".
        payload = re.search(r"GLOBAL (\S+)", text) or re.search(r"(?:unrecognized function|but got) (\S+)", text)
        if payload:
            raise BriskError(
                f"{path}: refused to load: it holds a Python object ({payload.group(1)}) that loading would run "
                "as code. brisk checkpoints hold only tensors and plain containers and load with "
                "weights_only=True. Use a checkpoint written by brisk-train, and do not load this file."
            ) from None
        if isinstance(e, RuntimeError) and "PytorchStreamReader" not in text and "mmap can only" not in text:
            raise
        raise BriskError(
            f"{path}: not a readable checkpoint: it is truncated or corrupt ({type(e).__name__}). "
            "Resume from another checkpoint in the same folder, or start the run again."
        ) from None


def peek(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint's contents, loaded as Lightning will (weights only) but without reading its tensors: torch's
    zip format, which Lightning writes, is memory-mapped (anything else is read whole). For the checks that only
    look at its hyperparameters and counters before Lightning loads it for real."""
    with readable(path):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    run_files.shallow(checkpoint, path)
    return checkpoint


class SafeCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or fsspec.utils.get_protocol(str(path)) != "file":
            # remote filesystems have no atomic rename to rely on: keep Lightning's behaviour there
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with published(path, durable=True) as tmp, open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them

    def load_checkpoint(self, path, map_location: Any | None = None, weights_only: bool | None = None) -> dict:
        # Always weights_only=True, whatever the caller passes: a checkpoint is data, never code.
        with readable(path):
            if map_location is None:
                checkpoint = super().load_checkpoint(path, weights_only=True)
            else:
                checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=True)
        run_files.shallow(checkpoint, path)
        return checkpoint
