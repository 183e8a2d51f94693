"""What an image cache folder must hold before brisk trains from it: checked like any other file it reads.

A cache is data on a disk: a full disk truncates meta.json, a person edits it, a copy loses the tail of
images.u8. Each key of meta.json is checked against what the folder's name and the listing of the image
folder say it must be, so a damaged cache is found at the start (and decoded again), not as a traceback,
a label out of range in the middle of an epoch, or a zero std that looks like divergence.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

CHANNELS = 3
KINDS = {
    "key": str,
    "count": int,
    "labels": list,
    "files": list,
    "skipped": list,
    "mean": list,
    "std": list,
}
WORDS = {int: "whole number", str: "string", list: "list"}


@dataclass(frozen=True)
class Expected:
    """What a cache of one split must hold: its key (of the layout version, the settings and the listing), the
    bytes of one decoded image, and the listing it was decoded from."""

    key: str
    image_bytes: int
    skip_bad: bool
    files: list[str]  # every image of the split, in listing order
    labels: list[int]  # the label of each of `files`, from its class folder


def _per_channel(value, low: float, high: float) -> bool:
    """One finite number in [low, high] per channel."""
    return (
        isinstance(value, list)
        and len(value) == CHANNELS
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        and all(low <= v <= high for v in value)
    )


def _problem(meta, expected: Expected, data_bytes: int) -> str | None:
    """Why `meta` is not a cache of `expected`, or None."""
    if not isinstance(meta, dict):
        return "meta.json does not hold a mapping"
    for name, kind in KINDS.items():
        if name not in meta:
            return f"meta.json has no {name!r}"
        if not isinstance(meta[name], kind) or isinstance(meta[name], bool):
            return f"meta.json: {name!r} is not a {WORDS[kind]}"
    if meta["key"] != expected.key:
        return "meta.json belongs to another folder listing, image size or version of brisk's cache"
    files, labels, skipped = meta["files"], meta["labels"], meta["skipped"]
    if not meta["count"] == len(files) == len(labels) or not files:
        return f"meta.json: 'count' {meta['count']}, {len(files)} files and {len(labels)} labels do not agree"
    label_of = dict(zip(expected.files, expected.labels, strict=True))
    order = {f: i for i, f in enumerate(expected.files)}
    kept = [order.get(f) if isinstance(f, str) else None for f in files]
    if None in kept or kept != sorted(set(kept)):
        return "meta.json: 'files' are not the images of this folder, in order"
    if labels != [label_of[f] for f in files] or not all(type(y) is int for y in labels):
        return "meta.json: 'labels' do not match the class folders of its files"
    left_out = set(expected.files) - set(files)
    if not all(isinstance(f, str) for f in skipped) or len(skipped) != len(left_out) or set(skipped) != left_out:
        return "meta.json: 'skipped' does not list the images that were left out"
    if skipped and not expected.skip_bad:
        return "meta.json: 'skipped' lists images, but data.skip_bad=false keeps every image"
    mean, std = meta["mean"], meta["std"]
    if not _per_channel(mean, 0, 255) or not _per_channel(std, 0, 255) or min(std) <= 0:
        return "meta.json: 'mean' and 'std' must be 3 finite numbers in 0..255 each, and every std above 0"
    size = meta["count"] * expected.image_bytes
    if data_bytes != size:
        return f"images.u8 holds {data_bytes} bytes, {size} expected"
    return None


def read(folder: Path, expected: Expected) -> tuple[dict | None, str | None]:
    """(meta, None) if `folder` is a sound cache of `expected`; (None, why not) if it is damaged; (None, None)
    if there is no such folder."""
    if not folder.exists():
        return None, None
    try:
        meta = json.loads((folder / "meta.json").read_bytes())
        data_bytes = (folder / "images.u8").stat().st_size
    except FileNotFoundError as e:
        return None, f"{Path(e.filename).name} is missing"
    except OSError as e:
        return None, f"{Path(e.filename).name} cannot be read ({e.strerror})"
    except ValueError as e:  # not UTF-8, not JSON: truncated or overwritten
        return None, f"meta.json is not valid JSON ({e})"
    problem = _problem(meta, expected, data_bytes)
    return (None, problem) if problem else (meta, None)
