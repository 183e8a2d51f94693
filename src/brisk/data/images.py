"""Image files -> uint8 tensors: the one preparation that training, the image cache and prediction share.

Each file is read from disk once. Pillow reads the header from its bytes first (Image.open decodes nothing):
an image that declares more than `max_pixels` is refused before a byte of it is decoded, since decoders
allocate whatever size a header declares (a 10 MB PNG can declare 60000 x 60000 pixels: 10.8 GB). Pillow
itself refuses more than PILLOW_PIXELS, whatever `max_pixels` says. A file with several frames gives its first
one: an animated GIF or WebP, a camera JPEG with extra pictures (MPO), an animated PNG (its still image).

PNG, JPEG and still WebP go through torchvision.io.decode_image; ImageReadMode.RGB turns grayscale, palette
and RGBA images into 3 channels. torchvision 0.29 cannot decode BMP ("Only jpeg, png, webp and gif"),
decodes every frame of a GIF at once and refuses animated WebP, so those are read with Pillow, which
decodes only the frame it is on. Every image is resized so its shorter side is `image_size`, then
centre-cropped to a square: the usual Resize + CenterCrop of classification, without distorting shapes.
"""

from __future__ import annotations

import errno
import io
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.v2 import functional as TF

from brisk.errors import BriskError, check

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
# What a file may hold, whatever its name says (a GIF saved as .png is common). Pillow tries no other of its
# plugins: rarely used decoders are where crafted files do harm.
FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "GIF")
WINDOW = 256
# Where Pillow's own bound stops Image.open (DecompressionBombError): a max_pixels above it would never apply.
PILLOW_PIXELS = 2 * Image.MAX_IMAGE_PIXELS


def check_max_pixels(key: str, value: object) -> None:
    """A bound on declared pixels (width x height) that applies: at least 1, at most Pillow's own."""
    check(key, value, lambda v: 1 <= v <= PILLOW_PIXELS, f"a whole number in 1..{PILLOW_PIXELS}", int)


@dataclass(frozen=True)
class Keys:
    """The settings a refusal names as its fix: the image folder's in training, brisk-predict's own in prediction
    (`skip_bad` None: there is no such setting)."""

    max_pixels: str = "data.max_pixels"
    skip_bad: str | None = "data.skip_bad"

    def fix(self, *options: str, left_out: str) -> str:
        """`options`, then leaving `left_out` out where a setting does that, as one sentence."""
        if self.skip_bad:
            options = (*options, f"set {self.skip_bad}=true to leave {left_out} out")
        return ", ".join(options[:-1]) + (", or " if len(options) > 1 else "") + options[-1] + "."


TRAINING = Keys()


def loop_error(link: str | Path) -> BriskError:
    return BriskError(
        f"{link} is a symbolic link back to a folder that holds it (or to itself), so the images below it would "
        "be listed without end. Remove the link."
    )


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def scan(folder: str | Path) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of each image file under `folder`, sorted by path; hidden files and folders and
    files of other types are left out. Plain strings and os.scandir: pathlib made listing 20,000 files take 9 s.

    Symbolic links are followed, so one that leads back to a folder above it (or to itself) is refused, named:
    listed through it, the same images would come again on every level until the kernel's ELOOP."""
    real = Path(folder).resolve()
    return sorted(_scan(str(folder), {_identity(os.stat(p)) for p in (real, *real.parents)}))


def _scan(folder: str, above: set[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """`scan` below `folder`; `above`: (st_dev, st_ino) of `folder` and of every folder that holds it."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError as e:
                if e.errno == errno.ELOOP:  # a link to itself, or a chain of links that comes back
                    raise loop_error(entry.path) from None
                raise
            if is_dir:
                identity = _identity(entry.stat())
                if identity in above:
                    raise loop_error(entry.path)
                found += _scan(entry.path, above | {identity})
            elif entry.name.lower().endswith(EXTENSIONS) and entry.is_file():
                st = entry.stat()
                found.append((entry.path, st.st_size, st.st_mtime_ns))
    return found


def list_images(folder: str | Path) -> list[Path]:
    """The image files under `folder`, sorted."""
    return [Path(path) for path, _, _ in scan(folder)]


def _reason(e: Exception) -> str:
    # torchvision prefixes its messages with the C++ source location, which tells a user nothing
    return re.sub(r"^.*?\.cpp:\d+, ", "", str(e)) or type(e).__name__


def _too_large(path: Path, declared: str, limit: str, fix: str) -> BriskError:
    return BriskError(f"{path}: declares {declared}, more than {limit}. {fix}")


def _rgb(im: Image.Image) -> torch.Tensor:
    """A Pillow image (its first frame) as uint8 3 x H x W, as torchvision's RGB decoding gives it: alpha dropped,
    grey repeated, 16-bit values shifted down by 8 bits."""
    if im.mode.startswith("I"):  # 16-bit grey (Pillow's I;16 or I): its convert would clip at 255, not scale
        grey = (np.array(im).astype(np.uint32) >> 8).astype(np.uint8)
        return torch.from_numpy(grey).expand(3, *grey.shape).contiguous()
    return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1).contiguous()


def _decode(path: Path, max_pixels: int | None, keys: Keys) -> torch.Tensor:
    raw = path.read_bytes()  # once: Pillow reads the header from it, torchvision decodes the same bytes
    try:
        im = Image.open(io.BytesIO(raw), formats=FORMATS)  # the header only
    except Image.DecompressionBombError:  # Pillow's own bound, checked as it opens: no setting raises it
        limit = f"{keys.max_pixels}={max_pixels}" if max_pixels else "Pillow opens"
        fix = keys.fix("Shrink or delete the file", left_out="such images")
        raise _too_large(path, f"more than {PILLOW_PIXELS} pixels", limit, fix) from None
    with im:
        width, height = im.size
        if max_pixels is not None and width * height > max_pixels:
            fix = keys.fix("Shrink or delete the file", f"raise {keys.max_pixels}", left_out="such images")
            raise _too_large(path, f"{width} x {height} pixels", f"{keys.max_pixels}={max_pixels}", fix)
        # PNG by Pillow too: torchvision 0.29's libpng path crashes the process (SIGSEGV, "Not enough image data")
        # on a PNG with fewer rows than its header declares, where Pillow raises. It costs ~15% more per file
        # (3.6 against 3.1 ms for a 500 x 375 PNG, one thread).
        if im.format in ("BMP", "GIF", "PNG") or (im.format == "WEBP" and im.is_animated):
            return _rgb(im)
    image = decode_image(torch.frombuffer(bytearray(raw), dtype=torch.uint8), mode=ImageReadMode.RGB)
    if image.dtype != torch.uint8:  # 16-bit PNGs
        image = TF.to_dtype(image, torch.uint8, scale=True)
    return image


def fit(image: torch.Tensor, image_size: int) -> torch.Tensor:
    """Resize the shorter side to `image_size` (antialiased), then take the centre square."""
    if image.shape[-2:] != (image_size, image_size):
        image = TF.resize(image, image_size, antialias=True)
        image = TF.center_crop(image, [image_size, image_size])
    return image


def read_image(path: Path, image_size: int, max_pixels: int | None, keys: Keys = TRAINING) -> torch.Tensor:
    """One file as a uint8 3 x image_size x image_size tensor; any failure is a BriskError naming the file (and
    `keys`, the settings that would let it through). `max_pixels`: refuse images that declare more (None: no bound)."""
    try:
        image = fit(_decode(path, max_pixels, keys), image_size)
        if image.shape != (3, image_size, image_size):  # whatever a decoder returned, it stays this file's problem
            raise ValueError(f"it decoded to shape {tuple(image.shape)}")
        return image
    except BriskError:
        raise
    except Exception as e:
        fix = keys.fix("Replace or delete the file", left_out="unreadable images")
        raise BriskError(f"{path}: cannot read this image ({_reason(e)}). {fix}") from None


def _try_read(path: Path, image_size: int, max_pixels: int | None, keys: Keys) -> torch.Tensor | BriskError:
    try:
        return read_image(path, image_size, max_pixels, keys)
    except BriskError as e:
        return e


def read_images(
    paths: Sequence[str | Path], image_size: int, max_pixels: int | None, keys: Keys = TRAINING
) -> Iterator[torch.Tensor | BriskError]:
    """Each file's tensor, or the BriskError that says why it could not be read, in the order of `paths`.

    Threads: the decoders run in C++ without the GIL. Submitted a window at a time, so a million paths
    do not become a million futures before the first image arrives.
    """
    workers = min(8, len(os.sched_getaffinity(0)))
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(paths), WINDOW):
            window = paths[start : start + WINDOW]
            yield from pool.map(lambda p: _try_read(Path(p), image_size, max_pixels, keys), window)


def prepare_images(
    paths: Sequence[str | Path], image_size: int, max_pixels: int | None = None, keys: Keys = TRAINING
) -> torch.Tensor:
    """Files of any size and mode -> one uint8 N x 3 x image_size x image_size tensor, prepared exactly as in
    training (for prediction), refusing images that declare more than `max_pixels` (None: no bound). The first
    unreadable file stops it with a BriskError naming that file (and `keys`)."""
    out = torch.empty(len(paths), 3, image_size, image_size, dtype=torch.uint8)
    for i, image in enumerate(read_images([Path(p) for p in paths], image_size, max_pixels, keys)):
        if isinstance(image, BriskError):
            raise image
        out[i] = image
    return out
