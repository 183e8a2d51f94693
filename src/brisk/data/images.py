"""Image files -> uint8 tensors: the one preparation that training, the image cache and prediction share.

Pillow reads each file's header first (Image.open decodes nothing): an image that declares more than
`max_pixels` is refused before a byte of it is decoded, since decoders allocate whatever size a header
declares (a 10 MB PNG can declare 60000 x 60000 pixels: 10.8 GB). A file with several frames gives its
first one: an animated GIF or WebP, a camera JPEG with extra pictures (MPO), an animated PNG (its still image).

PNG, JPEG and still WebP go through torchvision.io.decode_image; ImageReadMode.RGB turns grayscale, palette
and RGBA images into 3 channels. torchvision 0.29 cannot decode BMP ("Only jpeg, png, webp and gif"),
decodes every frame of a GIF at once and refuses animated WebP, so those are read with Pillow, which
decodes only the frame it is on. Every image is resized so its shorter side is `image_size`, then
centre-cropped to a square: the usual Resize + CenterCrop of classification, without distorting shapes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.v2 import functional as TF

from brisk.errors import BriskError

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
# What a file may hold, whatever its name says (a GIF saved as .png is common). Pillow tries no other of its
# plugins: rarely used decoders are where crafted files do harm.
FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "GIF")
WINDOW = 256


def scan(folder: str | Path) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of each image file under `folder`, sorted by path; hidden files and folders and
    files of other types are left out. Plain strings and os.scandir: pathlib made listing 20,000 files take 9 s."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                found += scan(entry.path)
            elif entry.name.lower().endswith(EXTENSIONS) and entry.is_file():
                st = entry.stat()
                found.append((entry.path, st.st_size, st.st_mtime_ns))
    return sorted(found)


def list_images(folder: str | Path) -> list[Path]:
    """The image files under `folder`, sorted."""
    return [Path(path) for path, _, _ in scan(folder)]


def _reason(e: Exception) -> str:
    # torchvision prefixes its messages with the C++ source location, which tells a user nothing
    return re.sub(r"^.*?\.cpp:\d+, ", "", str(e)) or type(e).__name__


def _too_large(path: Path, declared: str, limit: str) -> BriskError:
    return BriskError(
        f"{path}: declares {declared}, more than {limit}. Shrink or delete the file, raise data.max_pixels, "
        "or set data.skip_bad=true to leave such images out."
    )


def _decode(path: Path, max_pixels: int | None) -> torch.Tensor:
    from PIL import Image

    try:
        im = Image.open(path, formats=FORMATS)  # the header only
    except Image.DecompressionBombError:  # Pillow's own bound, checked as it opens
        pillow = 2 * Image.MAX_IMAGE_PIXELS
        limit = f"data.max_pixels={max_pixels}" if max_pixels and max_pixels < pillow else "Pillow opens"
        raise _too_large(path, f"more than {pillow} pixels", limit) from None
    with im:
        width, height = im.size
        if max_pixels is not None and width * height > max_pixels:
            raise _too_large(path, f"{width} x {height} pixels", f"data.max_pixels={max_pixels}")
        if im.format in ("BMP", "GIF") or (im.format == "WEBP" and im.is_animated):
            return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1).contiguous()
    image = decode_image(str(path), mode=ImageReadMode.RGB)
    if image.dtype != torch.uint8:  # 16-bit PNGs
        image = TF.to_dtype(image, torch.uint8, scale=True)
    return image


def fit(image: torch.Tensor, image_size: int) -> torch.Tensor:
    """Resize the shorter side to `image_size` (antialiased), then take the centre square."""
    if image.shape[-2:] != (image_size, image_size):
        image = TF.resize(image, image_size, antialias=True)
        image = TF.center_crop(image, [image_size, image_size])
    return image


def read_image(path: Path, image_size: int, max_pixels: int | None) -> torch.Tensor:
    """One file as a uint8 3 x image_size x image_size tensor; any failure is a BriskError naming the file.
    `max_pixels`: refuse images that declare more (None: no bound)."""
    try:
        image = fit(_decode(path, max_pixels), image_size)
        if image.shape != (3, image_size, image_size):  # whatever a decoder returned, it stays this file's problem
            raise ValueError(f"it decoded to shape {tuple(image.shape)}")
        return image
    except BriskError:
        raise
    except Exception as e:
        raise BriskError(
            f"{path}: cannot read this image ({_reason(e)}). Replace or delete the file, "
            "or set data.skip_bad=true to leave unreadable images out."
        ) from None


def _try_read(path: Path, image_size: int, max_pixels: int | None) -> torch.Tensor | BriskError:
    try:
        return read_image(path, image_size, max_pixels)
    except BriskError as e:
        return e


def read_images(
    paths: Sequence[str | Path], image_size: int, max_pixels: int | None
) -> Iterator[torch.Tensor | BriskError]:
    """Each file's tensor, or the BriskError that says why it could not be read, in the order of `paths`.

    Threads: the decoders run in C++ without the GIL. Submitted a window at a time, so a million paths
    do not become a million futures before the first image arrives.
    """
    workers = min(8, len(os.sched_getaffinity(0)))
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(paths), WINDOW):
            yield from pool.map(lambda p: _try_read(Path(p), image_size, max_pixels), paths[start : start + WINDOW])


def prepare_images(paths: Sequence[str | Path], image_size: int, max_pixels: int | None = None) -> torch.Tensor:
    """Files of any size and mode -> one uint8 N x 3 x image_size x image_size tensor, prepared exactly as in
    training (for prediction), refusing images that declare more than `max_pixels` (None: no bound). The first
    unreadable file stops it with a BriskError naming that file."""
    out = torch.empty(len(paths), 3, image_size, image_size, dtype=torch.uint8)
    for i, image in enumerate(read_images([Path(p) for p in paths], image_size, max_pixels)):
        if isinstance(image, BriskError):
            raise image
        out[i] = image
    return out
