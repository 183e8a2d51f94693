"""Decoded images on disk: one uint8 file per split, memory-mapped when loaded.

A cache is a folder `<name>-<key>/` holding `images.u8` (N x 3 x S x S bytes, nothing else) and
`meta.json` (labels, file names, channel statistics). The key hashes the file list, each file's
size and mtime, and the settings that change the decoded pixels: a changed folder gets a new key and
is decoded again. A folder whose contents fail `cache_meta`'s checks is named in one warning line and
decoded again.

Building: one at a time per `data.cache_dir`, under an flock on that folder, so two runs that need the
same cache decode it once and both use it. The folder is built as `.<name>-<key>.partial` and renamed
into place, so a reader finds all of it or none of it; one that a killed build left is removed by the
next build. The free space is measured under the lock, counting the folders the build removes first (a
killed build's, a damaged cache), and the space for the pixels is reserved before the first image is
decoded; they are written with write(), not through a memory map: a full disk is one error naming
data.cache_dir, where a store into a memory-mapped page the disk has no room for is a SIGBUS. The image
folder is listed again when the pixels are written: a cache is only published for a listing that held from
start to end.

Memory-mapped, a split larger than RAM still trains (at disk speed), and DDP ranks on one node
share the page cache instead of holding a copy each.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from brisk.data import cache_meta, splits
from brisk.data.images import read_images
from brisk.errors import BriskError

log = logging.getLogger("brisk")
VERSION = 2  # bump when the layout or the preparation of images changes
PROGRESS_EVERY_S = 2.0
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)
Entries = list[tuple[str, int, int]]  # (path, size, mtime_ns) per file: images.scan


@dataclass(frozen=True)
class Source:
    """A split to cache: its folder (named in messages), its listing and labels, and how to list it again."""

    folder: Path
    entries: Entries
    labels: list[int]
    relist: Callable[[], Entries]

    @property
    def files(self) -> list[str]:
        return [path for path, _, _ in self.entries]


@dataclass(frozen=True)
class Settings:
    """What changes the decoded pixels, or which images are kept."""

    image_size: int
    skip_bad: bool
    max_pixels: int

    @property
    def image_bytes(self) -> int:
        return 3 * self.image_size**2


def key(entries: Entries, settings: Settings) -> str:
    """Of the listing (images.scan) and the settings: what a cache folder holds is decided by both."""
    h = hashlib.sha256(json.dumps([VERSION, settings.image_size, settings.skip_bad, settings.max_pixels]).encode())
    h.update("\n".join(f"{path}\0{size}\0{mtime}" for path, size, mtime in entries).encode())
    return h.hexdigest()[:16]


class _Progress:
    """A log line every few seconds while decoding: thousands of images take a while the first time."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.start = self.last = time.perf_counter()

    def tick(self) -> None:
        self.done += 1
        now = time.perf_counter()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            log.info("%s: %d/%d images decoded (%.0f images/s)", self.label, self.done, self.total, self.rate)

    @property
    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self.start, 1e-9)


def _map(path: Path, count: int, settings: Settings) -> torch.Tensor:
    size, side = count * settings.image_bytes, settings.image_size
    # shared=False: a private mapping; pages are read on first use and shared with other readers of the file
    return torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8).view(count, 3, side, side)


def _size(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} KB"


def _no_room(cache_dir: Path, what: str) -> BriskError:
    return BriskError(
        f"data.cache_dir={cache_dir}: {what}. Free some space, or set data.cache_dir to a folder on a bigger disk."
    )


def _bytes_on_disk(folder: Path) -> int:
    """The space the files under `folder` take (links not followed): what removing it gives back."""
    return sum(os.lstat(os.path.join(parent, f)).st_blocks * 512 for parent, _, files in os.walk(folder) for f in files)


def _check_room(cache_dir: Path, source: Source, needed: int, removed: list[Path]) -> None:
    """Refuse before anything is written or decoded if `cache_dir` cannot take `needed` bytes once the folders
    `removed` (a killed build's, a damaged cache) are gone. Under the build lock: a build that holds it has
    already reserved its space, and this one may only have to wait for it."""
    free = shutil.disk_usage(cache_dir).free + sum(map(_bytes_on_disk, removed))
    if free < needed:
        raise _no_room(cache_dir, f"the image cache of {source.folder} needs {_size(needed)}, {_size(free)} is free")


@contextlib.contextmanager
def _writing(cache_dir: Path, source: Source, needed: int) -> Iterator[None]:
    """Any failure to write into `cache_dir` as one BriskError that names data.cache_dir."""
    try:
        yield
    except OSError as e:
        if e.errno == errno.EFBIG:  # FAT32 and exFAT stop at 4 GB a file, and `ulimit -f` at what it says
            raise BriskError(
                f"data.cache_dir={cache_dir}: its filesystem cannot hold a file of {_size(needed)}, the image cache "
                f"of {source.folder} (or a limit on file sizes, ulimit -f, forbids it). Set data.cache_dir to a "
                "folder on another filesystem."
            ) from None
        if e.errno in NO_ROOM:  # the disk filled up after the check of its free space
            raise _no_room(
                cache_dir, f"the disk filled up while the image cache of {source.folder} ({_size(needed)}) was written"
            ) from None
        raise BriskError(
            f"cannot write the image cache in {cache_dir} ({e.strerror}). Set data.cache_dir to a writable folder."
        ) from None


@contextlib.contextmanager
def _locked(cache_dir: Path) -> Iterator[None]:
    """Hold the build lock of `cache_dir` (the kernel drops it when the process dies: no stale lock)."""
    fd = os.open(cache_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s: another brisk process is building an image cache there; waiting for it", cache_dir)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP):  # NFS without its lock daemon: build unlocked
                raise
        yield
    finally:
        os.close(fd)  # releases the lock


def _decode_into(path: Path, source: Source, settings: Settings, label: str):
    """Decode the source's files into `path`; return the kept labels and files, the skipped files, and the rate."""
    kept_labels, kept_files, skipped = [], [], []
    progress = _Progress(label, len(source.files))
    with open(path, "wb") as out:
        try:
            os.posix_fallocate(out.fileno(), 0, len(source.files) * settings.image_bytes)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):  # a filesystem that cannot reserve: write() says
                raise
        # closed here, on the way out: left to the garbage collector, its pool may be shut down from its own thread
        with contextlib.closing(read_images(source.files, settings.image_size, settings.max_pixels)) as images:
            for file, y, image in zip(source.files, source.labels, images, strict=True):
                if isinstance(image, BriskError):
                    if not settings.skip_bad:
                        raise image
                    skipped.append(file)
                else:
                    out.write(image.numpy().tobytes())
                    kept_labels.append(y)
                    kept_files.append(file)
                progress.tick()
        out.truncate()  # skipped files leave a reserved tail
    return kept_labels, kept_files, skipped, progress.rate


def _changed(source: Source) -> BriskError | None:
    """The error to give if the folder no longer holds the files (and sizes and mtimes) it was listed with."""
    try:
        now = source.relist()
    except (OSError, BriskError):
        now = None
    if now == source.entries:
        return None
    return BriskError(
        f"{source.folder}: files there changed while brisk decoded them (added, removed or rewritten). "
        "Run again once nothing is writing to that folder."
    )


def _ours(cache_dir: Path, name: str, suffix: str = "") -> list[Path]:
    """The folders `<name>-<key><suffix>` in `cache_dir`: by exact pattern, since data.cache_dir may hold
    anything else."""
    pattern = re.compile(re.escape(name) + r"-[0-9a-f]{16}" + re.escape(suffix))
    return [p for p in cache_dir.iterdir() if pattern.fullmatch(p.name)]


def _fill(folder: Path, cache_key: str, source: Source, settings: Settings, label: str) -> dict:
    """Decode `source` into `folder`: images.u8, then meta.json; return the meta."""
    try:
        kept_labels, kept_files, skipped, rate = _decode_into(folder / "images.u8", source, settings, label)
    except BriskError as e:  # a file that vanished or was half-written may be why
        raise _changed(source) or e from None
    if error := _changed(source):
        raise error
    if not kept_labels:
        raise BriskError(f"{label}: none of its {len(source.files)} images could be read (first: {skipped[0]}).")
    mean, std = splits.channel_stats(_map(folder / "images.u8", len(kept_labels), settings))
    meta = {
        "key": cache_key,
        "count": len(kept_labels),
        "labels": kept_labels,
        "files": kept_files,
        "skipped": skipped,
        "mean": mean,
        "std": std,
        "decode_images_per_sec": rate,
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


def _removed(cache_dir: Path, name: str, final: Path) -> list[Path]:
    """What a build of `final` removes before it writes: a killed build's temporary folders (none runs now: this
    one holds the lock), and `final` itself if it is there (a damaged cache: cache_meta.read said why)."""
    return [*_ours(cache_dir, f".{name}", ".partial"), *([final] if final.exists() else [])]


def _publish(cache_dir: Path, name: str, cache_key: str, source: Source, settings: Settings) -> dict:
    """Decode `source` into `.<name>-<key>.partial`, then rename that to `<name>-<key>`. Under the build lock."""
    final = cache_dir / f"{name}-{cache_key}"
    for old in _removed(cache_dir, name, final):  # first, so the new cache has their space
        shutil.rmtree(old, ignore_errors=True)
    staging = cache_dir / f".{final.name}.partial"
    staging.mkdir()
    try:
        meta = _fill(staging, cache_key, source, settings, name)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    rate = meta["decode_images_per_sec"]
    log.info("%s: %d images decoded at %.0f images/s, cached in %s", name, meta["count"], rate, final)
    for old in _ours(cache_dir, name):  # earlier versions of this split's folder
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return meta


def build(cache_dir: Path, name: str, source: Source, settings: Settings) -> tuple[Path, dict]:
    """The cache folder `<name>-<key>` of `source` and its checked meta.json; decoded now if it is missing or
    fails its checks."""
    cache_key = key(source.entries, settings)
    final = cache_dir / f"{name}-{cache_key}"
    expected = cache_meta.Expected(cache_key, settings.image_bytes, settings.skip_bad, source.files, source.labels)
    meta, _ = cache_meta.read(final, expected)
    if meta is not None:
        return final, meta
    needed = len(source.files) * settings.image_bytes  # images.u8; meta.json is small beside it
    with _writing(cache_dir, source, needed):
        cache_dir.mkdir(parents=True, exist_ok=True)
        with _locked(cache_dir):
            meta, problem = cache_meta.read(final, expected)  # another run may have built it while this one waited
            if meta is not None:
                return final, meta
            if problem:
                log.warning("%s: the image cache is damaged (%s); decoding %s again", final, problem, source.folder)
            _check_room(cache_dir, source, needed, _removed(cache_dir, name, final))
            return final, _publish(cache_dir, name, cache_key, source, settings)


def load(folder: Path, meta: dict, settings: Settings) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(memory-mapped uint8 images, labels, meta) of a cache folder and the meta.json `build` checked against
    `settings`."""
    images = _map(folder / "images.u8", meta["count"], settings)
    return images, torch.tensor(meta["labels"], dtype=torch.int64), meta
