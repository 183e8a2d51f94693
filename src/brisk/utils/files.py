"""Files written whole or not at all, and checks that a folder can be written before anything is written in it."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from brisk.errors import BriskError


@contextlib.contextmanager
def published(path: Path, durable: bool = False) -> Iterator[Path]:
    """A new temporary file beside `path` to write to, renamed to `path` only if the block succeeds: a reader sees
    the old file or the new one, never half of one. Every file brisk keeps is written through here.

    The temporary name is unpredictable and created with O_EXCL (`tempfile.mkstemp`), so a link planted beside the
    target is never written through; the rename replaces a link at `path` itself rather than following it. The name
    keeps `path`'s suffix: savefig, torch.save and the ONNX writers may choose the format by it, and open the name
    themselves (they overwrite our empty file). A write cut short by SIGKILL leaves its file; the next write of the
    same target removes it. `durable`: the rename is also fsynced (the caller fsyncs the file's bytes)."""
    path = Path(path)
    _remove_abandoned(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f"{TMP}{path.suffix}", dir=path.parent)
    tmp = Path(name)
    try:
        # Held until the rename: a writer that holds it is alive, so `_remove_abandoned` leaves its file alone.
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide a table or checkpoint from the group
        yield tmp
        os.replace(tmp, path)
    finally:
        os.close(fd)
        tmp.unlink(missing_ok=True)
    if durable:
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a folder
            folder = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)


TMP = ".tmp"  # in every temporary name, before the target's suffix: .last.ckpt.<random>.tmp.ckpt


def _remove_abandoned(path: Path) -> None:
    """Remove the temporary files of earlier writes of `path` whose writer died (no one holds their lock). Only
    regular files are opened, never through a link (O_NOFOLLOW), and never blocking on a FIFO."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}{re.escape(TMP + path.suffix)}")
    with contextlib.suppress(OSError):
        names = [n for n in os.listdir(path.parent) if pattern.fullmatch(n)]
        for name in names:
            old = path.parent / name
            try:
                fd = os.open(old, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: a live writer holds it
                    old.unlink()
            except OSError:
                pass
            finally:
                os.close(fd)


@functools.cache
def _umask() -> int:
    # Read once: os.umask can only be read by setting it, which other threads would see for a moment.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> None:
    """`path` holds `text`, written whole (see `published`), its folder made if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with published(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def creatable(path: Path, key: str) -> None:
    """Raise BriskError unless `path` is (or can be made) a folder this process may write in. Writes nothing."""
    base = nearest_existing(path)
    try:
        if not base.is_dir():
            raise BriskError(f"{key}={path}: {base} is a file, not a folder. Choose another {key}.")
        _fits(path, base, key)
        # an unnamed temporary file (O_TMPFILE): proves write access and leaves no trace
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as e:
        raise BriskError(
            f"{key}={path}: cannot write in {base} ({e.strerror}). Choose a folder you can write to, "
            f"e.g. {key}=<folder>, or fix its permissions."
        ) from None


def _fits(path: Path, base: Path, key: str) -> None:
    """Refuse a folder name or a path longer than the file system of `base` takes (mkdir's ENAMETOOLONG)."""
    try:
        name_max, path_max = os.pathconf(base, "PC_NAME_MAX"), os.pathconf(base, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    for part in path.absolute().parts[len(base.absolute().parts) :]:
        if (size := len(os.fsencode(part))) > name_max:
            raise BriskError(
                f"{key}: the folder name {part[:20]}... is {size} bytes long, and the file system of {base} "
                f"takes at most {name_max}. Choose a shorter {key}."
            )
    if (size := len(os.fsencode(str(path.absolute())))) >= path_max:
        raise BriskError(
            f"{key}: the path is {size} bytes long, and the file system of {base} takes at most {path_max - 1}. "
            f"Choose a shorter {key}."
        )
