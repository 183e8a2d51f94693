"""Reading what a run left on disk (.hydra/*.yaml, summary.json) as data: bounded, never blocking, never expanded.

Anyone who can write into a runs folder decides what these files hold, and brisk-eval, brisk-compare and a resume
read them. So a file is opened only if it is a regular file (a FIFO would block the reader forever, a link to
/dev/zero would fill memory), up to a size no real run file comes near; YAML is read without aliases (an alias bomb
expands a kilobyte into gigabytes) and no deeper than MAX_DEPTH (deeper nesting ends in RecursionError somewhere);
and what is read stays plain Python data, never an OmegaConf node, so a `${oc.env:...}` in it is a string that no
resolver ever runs. Every failure is one BriskError that names the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError

from brisk.errors import BriskError, first_line

# A run's .hydra/*.yaml is a few KB; yaml's pure-Python reader (the one whose composer can refuse aliases) takes
# seconds a MB on a busy machine. summary.json holds the test confusion matrix: ~15 MB for 1000 classes.
YAML_BYTES = 1 << 20
JSON_BYTES = 64 << 20
# Deeper than any config or checkpoint brisk writes (about 6), far below Python's recursion limit.
MAX_DEPTH = 100
FIX = "Restore it from the run, or delete it"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"


def _open_regular(path: Path) -> int:
    """A descriptor of `path` if it is a regular file (links followed: a run folder may itself be reached through
    one); BriskError otherwise. O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise BriskError(f"{path}: cannot be opened ({e.strerror}). {FIX}.") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise BriskError(f"{path}: is {_kind(mode)}, not a regular file, so brisk does not read it. {FIX}.")
    return fd


def regular(path: str | os.PathLike) -> None:
    """Raise BriskError unless `path` is a regular file (see `_open_regular`); reads nothing. For the files another
    reader opens next (a checkpoint, which torch.load or Lightning then reads)."""
    os.close(_open_regular(Path(path)))


def read_bytes(path: str | os.PathLike, limit: int) -> bytes:
    """The content of the regular file `path`, refused (BriskError) past `limit` bytes."""
    path = Path(path)
    fd = _open_regular(path)
    try:
        if os.fstat(fd).st_size > limit:
            raise BriskError(f"{path}: larger than {limit >> 20} MB, far larger than brisk writes it. {FIX}.")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):  # a file still growing is cut off at the bound too
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise BriskError(f"{path}: larger than {limit >> 20} MB, far larger than brisk writes it. {FIX}.")
        return b"".join(chunks)
    except OSError as e:
        raise BriskError(f"{path}: cannot be read ({e.strerror}). {FIX}.") from None
    finally:
        os.close(fd)


class _DataLoader(yaml.SafeLoader):
    """yaml's safe loader (plain values only), refusing aliases and nesting deeper than MAX_DEPTH while it composes
    the document, before anything is expanded or built."""

    depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise ComposerError(None, None, "an alias (*name), which brisk never expands", self.peek_event().start_mark)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _text(path: Path, limit: int) -> str:
    try:
        return read_bytes(path, limit).decode("utf-8")
    except UnicodeDecodeError as e:
        raise BriskError(f"{path}: not UTF-8 text (byte {e.start}). {FIX}.") from None


def load_yaml(path: str | os.PathLike, what: str = "a run file") -> Any:
    """A run's YAML file as plain data (see the module's docstring); BriskError naming the file (`what` it should
    be) otherwise."""
    path = Path(path)
    text = _text(path, YAML_BYTES)
    try:
        return yaml.load(text, Loader=_DataLoader)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as e:  # its str quotes the file's line: say where only
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise BriskError(f"{path}: cannot be read as {what}: {e.problem or e.context}{where}. {FIX}.") from None
    except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: an int of over 4300 digits
        raise BriskError(f"{path}: cannot be read as {what} ({type(e).__name__}: {first_line(e)}). {FIX}.") from None


def load_json(path: str | os.PathLike) -> Any:
    """A run's JSON file (summary.json) as plain data, no deeper than MAX_DEPTH; BriskError naming it otherwise."""
    path = Path(path)
    text = _text(path, JSON_BYTES)
    try:
        content = json.loads(text)
    except RecursionError:  # json's C reader recurses once per level
        raise BriskError(f"{path}: nested deeper than {MAX_DEPTH} levels. {FIX}.") from None
    except ValueError as e:
        raise BriskError(f"{path}: not JSON brisk reads ({first_line(e)}). {FIX}.") from None
    shallow(content, path)
    return content


def shallow(content: Any, source: str | os.PathLike) -> None:
    """Raise BriskError (naming `source`) if the plain containers in `content` nest deeper than MAX_DEPTH, which the
    recursive code that reads them (copies, walks, OmegaConf) would end in RecursionError on. Walks without
    recursing; anything that is not a dict, list, tuple or set (a tensor, a number) is a leaf. Each level keeps one
    of each object: a pickle may hold the same list many times over (its memo), which must not multiply the walk."""
    level: Iterable[Any] = [content]
    for _ in range(MAX_DEPTH + 1):
        level = {
            id(child): child
            for node in level
            if isinstance(node, dict | list | tuple | set | frozenset)
            for child in (node.values() if isinstance(node, dict) else node)
        }.values()
        if not level:
            return
    raise BriskError(f"{source}: nested deeper than {MAX_DEPTH} levels, which no file brisk writes is. {FIX}.")
