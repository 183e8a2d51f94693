"""Decoded images on disk: one uint8 file per split, memory-mapped when loaded.

A cache is a folder `<name>-<key>/` holding `images.u8` (N x 3 x S x S bytes, nothing else) and
`meta.json` (labels, file names, channel statistics). The key hashes the file list, each file's
size and mtime, the image size and `skip_bad`: a changed folder gets a new key and is decoded again.
The folder is built under a temporary name and renamed into place, so a reader finds all of it or
none of it; an interrupted build leaves only a temporary folder, removed on the way out.

Memory-mapped, a split larger than RAM still trains (at disk speed), and DDP ranks on one node
share the page cache instead of holding a copy each.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from brisk.data import splits
from brisk.data.images import read_images
from brisk.errors import BriskError

log = logging.getLogger("brisk")
VERSION = 1  # bump when the layout or the preparation of images changes
PROGRESS_EVERY_S = 2.0


def key(entries: list[tuple[str, int, int]], image_size: int, skip_bad: bool) -> str:
    """Of (path, size, mtime_ns) per file (images.scan), and the settings that change the decoded pixels."""
    h = hashlib.sha256(json.dumps([VERSION, image_size, skip_bad]).encode())
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


def _map(path: Path, count: int, image_size: int) -> torch.Tensor:
    if count == 0:
        return torch.empty(0, 3, image_size, image_size, dtype=torch.uint8)
    size = count * 3 * image_size * image_size
    # shared=False: a private mapping; pages are read on first use and shared with other readers of the file
    return torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8).view(count, 3, image_size, image_size)


def _decode_into(out: Path, files: list[Path], labels: list[int], image_size: int, skip_bad: bool, label: str):
    """Decode `files` into out/images.u8; return the kept labels and files, and the skipped files."""
    pixels = np.memmap(out / "images.u8", dtype=np.uint8, mode="w+", shape=(len(files), 3, image_size, image_size))
    kept_labels, kept_files, skipped = [], [], []
    progress = _Progress(label, len(files))
    for path, y, image in zip(files, labels, read_images(files, image_size), strict=True):
        if isinstance(image, BriskError):
            if not skip_bad:
                raise image
            skipped.append(str(path))
        else:
            pixels[len(kept_labels)] = image.numpy()
            kept_labels.append(y)
            kept_files.append(str(path))
        progress.tick()
    pixels.flush()
    del pixels
    os.truncate(out / "images.u8", len(kept_labels) * 3 * image_size * image_size)  # skipped files leave a tail
    return kept_labels, kept_files, skipped, progress.rate


def build(cache_dir: Path, name: str, cache_key: str, files, labels, image_size: int, skip_bad: bool) -> Path:
    """Decode `files` into the cache folder `<name>-<key>` unless it is there; return that folder."""
    final = cache_dir / f"{name}-{cache_key}"
    if (final / "meta.json").is_file():
        return final
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        staging = tempfile.TemporaryDirectory(prefix=f".{name}-", dir=cache_dir)
    except OSError as e:
        raise BriskError(
            f"cannot write the image cache in {cache_dir} ({e.strerror}). Set data.cache_dir to a writable folder."
        ) from None
    with staging as tmp:
        out = Path(tmp) / "cache"
        out.mkdir()
        kept_labels, kept_files, skipped, rate = _decode_into(out, files, labels, image_size, skip_bad, name)
        if not kept_labels:
            raise BriskError(f"{name}: none of its {len(files)} images could be read (first: {skipped[0]}).")
        mean, std = splits.channel_stats(_map(out / "images.u8", len(kept_labels), image_size))
        meta = {
            "version": VERSION,
            "count": len(kept_labels),
            "image_size": image_size,
            "labels": kept_labels,
            "files": kept_files,
            "skipped": skipped,
            "mean": mean,
            "std": std,
            "decode_images_per_sec": rate,
        }
        (out / "meta.json").write_text(json.dumps(meta))
        try:
            out.rename(final)
        except OSError:
            if not (final / "meta.json").is_file():  # not another process that published the same cache first
                raise
    log.info("%s: %d images decoded at %.0f images/s, cached in %s", name, len(kept_labels), rate, final)
    for old in cache_dir.glob(f"{name}-*"):  # earlier versions of this split's folder
        if old != final and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    return final


def load(folder: Path) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(memory-mapped uint8 images, labels, meta) of a cache folder that `build` made."""
    meta = json.loads((folder / "meta.json").read_text())
    n, size = meta["count"], meta["image_size"]
    if (folder / "images.u8").stat().st_size != n * 3 * size * size:
        raise BriskError(f"{folder}: the image cache is damaged (wrong size). Delete that folder: brisk rebuilds it.")
    return _map(folder / "images.u8", n, size), torch.tensor(meta["labels"], dtype=torch.int64), meta
