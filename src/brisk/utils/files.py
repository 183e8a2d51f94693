"""Files written whole or not at all, and checks that a folder can be written before anything is written in it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from brisk.errors import BriskError


@contextlib.contextmanager
def published(path: Path, durable: bool = False) -> Iterator[Path]:
    """A temporary name beside `path` to write to, renamed to `path` only if the block succeeds: a reader sees the
    old file or the new one, never half of one. One fixed name per target, so a write cut short by SIGKILL is
    overwritten by the next. `durable`: the rename is also fsynced (the caller fsyncs the file's bytes)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a folder
            folder = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)


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
    import tempfile

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
