"""How fast data=image_folder starts: the first start (decode + cache) and a cached start, in images/s.

    python scripts/image_folder_speed.py <folder> [--images 20000] [--file-size 32] [--image-size 32]

Writes <images> generated images (half PNG, half JPEG, 10 classes; brisk.data.synthetic's patterns)
into <folder>/train/ unless it is already there, then times ImageFolderDataModule's prepare_data + setup
twice: once without its cache, once with it.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path

from PIL import Image

from brisk.data import ImageFolderDataModule
from brisk.data import synthetic as syn


def write_folder(root: Path, n: int, file_size: int) -> None:
    x, y = syn.generate(n, seed=0, noise=0.25)
    for i in range(n):
        path = root / "train" / f"class_{int(y[i])}" / f"{i:06d}.{'png' if i % 2 else 'jpg'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(x[i].permute(1, 2, 0).numpy())
        (image if file_size == 32 else image.resize((file_size, file_size))).save(path)


def start(root: Path, image_size: int) -> float:
    t = time.perf_counter()
    dm = ImageFolderDataModule(root=str(root), image_size=image_size, val_size=0.1)
    dm.prepare_data()
    dm.setup("fit")
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--file-size", type=int, default=32, help="pixels per side of the files written")
    parser.add_argument("--image-size", type=int, default=32, help="data.image_size")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not (args.folder / "train").is_dir():
        write_folder(args.folder, args.images, args.file_size)
    shutil.rmtree(args.folder / ".brisk-cache", ignore_errors=True)
    n = sum(1 for p in (args.folder / "train").rglob("*") if p.is_file())
    for label in ("first start (decode + cache)", "cached start"):
        seconds = start(args.folder, args.image_size)
        print(f"{label}: {n} images in {seconds:.2f} s, {n / seconds:.0f} images/s")


if __name__ == "__main__":
    main()
