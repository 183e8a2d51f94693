"""What a DataModule does to a whole split: sizes given as counts or fractions, channel statistics,
exact duplicates. All of it works on row indices into a (possibly memory-mapped) uint8 tensor, so a
split is never copied whole."""

from __future__ import annotations

import hashlib

import torch

from brisk.errors import BriskError

CHUNK = 4096  # images per step: bounded memory for splits larger than RAM


def count(value: int | float, total: int, key: str, low: int = 0, high: int | None = None) -> int:
    """`value` images (an int) or that share of `total` (a float in (0, 1]), checked to lie in low..high."""
    high = total if high is None else high
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BriskError(f"{key}={value} must be a number of images or a fraction such as 0.1.")
    n = round(value * total) if isinstance(value, float) else value
    if isinstance(value, float) and not 0 < value <= 1:
        raise BriskError(f"{key}={value}: a fraction must lie in (0, 1].")
    if not low <= n <= high:
        raise BriskError(f"{key}={value} gives {n} images; it must be between {low} and {high} ({total} available).")
    return n


def channel_stats(images: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation on the 0..255 scale, over every pixel of the given images
    (a std of 0 is given as 255).

    Integer sums are exact: 255^2 per pixel leaves int64 room for ~10^13 pixels per channel.
    """
    if not len(images):
        raise BriskError("the training split is empty: there is nothing to compute the channel statistics from.")
    c = images.shape[1]
    s1, s2 = torch.zeros(c, dtype=torch.int64), torch.zeros(c, dtype=torch.int64)
    for start in range(0, len(images), CHUNK):
        x = images[start : start + CHUNK].transpose(0, 1).reshape(c, -1).long()
        s1 += x.sum(1)
        s2 += (x * x).sum(1)
    n = len(images) * images[0, 0].numel()
    mean = s1.double() / n
    std = (s2.double() / n - mean * mean).clamp_min(0).sqrt()
    # A channel with one value in every image (all-black pictures, an unused channel) has nothing to scale by:
    # dividing by its std of 0 would make every input NaN. By 255 instead, any other value stays within [-1, 1].
    std = torch.where(std > 0, std, torch.full_like(std, 255.0))
    return mean.tolist(), std.tolist()


def digests(images: torch.Tensor, rows: torch.Tensor) -> list[bytes]:
    """A hash of each image's bytes (the decoded pixels, so a re-saved copy of a file counts too)."""
    out = []
    for start in range(0, len(rows), CHUNK):
        chunk = images.index_select(0, rows[start : start + CHUNK]).numpy()
        out += [hashlib.blake2b(image.tobytes(), digest_size=16).digest() for image in chunk]
    return out


def first_copies(images: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, set[bytes]]:
    """The rows whose image has not appeared earlier in `rows`, and the set of all their digests."""
    seen: set[bytes] = set()
    keep = []
    for i, digest in enumerate(digests(images, rows)):
        if digest not in seen:
            seen.add(digest)
            keep.append(i)
    return rows[torch.tensor(keep, dtype=torch.long)], seen
