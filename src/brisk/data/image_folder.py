"""ImageFolderDataModule (`data=image_folder`): your own images, in the layout people really have.

    <data.root>/train/<class>/*.png|jpg|jpeg|bmp|webp    required; class names are the folder names
    <data.root>/val/<class>/*                             optional; without it, data.val_size images of train/
    <data.root>/test/<class>/*                            optional; without it, testing is skipped

Each split is decoded once into the image cache (`brisk.data.image_cache`) and memory-mapped from
there on every later start.
"""

from __future__ import annotations

import hashlib
import logging
from functools import cached_property, partial
from pathlib import Path

import torch

from brisk.data import image_cache
from brisk.data.base import TensorDataModule
from brisk.data.images import EXTENSIONS, check_max_pixels, scan
from brisk.errors import BriskError, check_flag
from brisk.registry import DATASETS

log = logging.getLogger("brisk")
SPLITS = ("train", "val", "test")


@DATASETS.register("image_folder")
class ImageFolderDataModule(TensorDataModule):
    """Args:
    root: the folder that holds train/ (and optionally val/ and test/).
    image_size: images are resized (shorter side) and centre-cropped to image_size x image_size.
    skip_bad: leave unreadable or corrupt images out (and say how many) instead of stopping.
    max_pixels: an image that declares more pixels (width x height) is a bad file, refused before it is decoded.
    cache_dir: where the decoded splits are kept; null: `<root>/.brisk-cache`.
    **common: the keys every dataset shares (`brisk.data.base.TensorDataModule`).
    """

    def __init__(
        self,
        root: str | None = None,
        image_size: int = 32,
        skip_bad: bool = False,
        max_pixels: int = 64_000_000,
        cache_dir: str | None = None,
        **common,
    ) -> None:
        super().__init__(**common)
        if not root:
            raise BriskError("data.root is not set: brisk-train data=image_folder data.root=<folder with train/ in it>")
        if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
            raise BriskError(f"data.image_size={image_size} must be a whole number of pixels >= 1, e.g. 32.")
        check_max_pixels("data.max_pixels", max_pixels)
        check_flag("data.skip_bad", skip_bad)
        self._folders: dict[str, tuple[Path, dict] | None] = {}
        self._loaded: dict[str, tuple[torch.Tensor, torch.Tensor, dict] | None] = {}

    @property
    def root(self) -> Path:
        return Path(self.hparams.root).expanduser()

    @property
    def cache_dir(self) -> Path:
        return Path(self.hparams.cache_dir) if self.hparams.cache_dir else self.root / ".brisk-cache"

    @cached_property
    def class_names(self) -> list[str]:
        train = self.root / "train"
        if not train.is_dir():
            raise BriskError(
                f"data.root={self.root}: no train/ folder there. An image folder holds train/<class>/<images> "
                "(and optionally val/ and test/ beside train/); point data.root at it."
            )
        names = sorted(d.name for d in train.iterdir() if d.is_dir() and not d.name.startswith("."))
        if not names:
            raise BriskError(f"{train}: no class folders. Put the images of each class in train/<class name>/.")
        if len(names) == 1:  # one logit: the loss is 0 and the accuracy 1 whatever the net does
            raise BriskError(
                f"{train}: one class folder ({names[0]}), and a classifier needs two or more. Add a folder of "
                "images for each other class, e.g. train/other/."
            )
        return names

    @property
    def image_size(self) -> int:
        return self.hparams.image_size

    @property
    def settings(self) -> image_cache.Settings:
        return image_cache.Settings(self.hparams.image_size, self.hparams.skip_bad, self.hparams.max_pixels)

    def _listing(self, split: str) -> tuple[list[tuple[str, int, int]], list[int]] | None:
        """(path, size, mtime_ns) of each image of the split, and its label; None if there is no such folder."""
        folder = self.root / split
        if not folder.is_dir():
            return None
        index = {name: i for i, name in enumerate(self.class_names)}
        files: list[tuple[str, int, int]] = []
        labels: list[int] = []
        for sub in sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")):
            if sub.name not in index:
                raise BriskError(
                    f"{sub}: class {sub.name!r} has no folder in {self.root / 'train'}. "
                    "Every class needs training images: add them, or remove this folder."
                )
            found = scan(sub)
            if not found and split == "train":
                raise BriskError(f"{sub}: no images ({' '.join(EXTENSIONS)}). Add some, or remove the folder.")
            files += found
            labels += [index[sub.name]] * len(found)
        if not files:
            raise BriskError(
                f"{folder}: no images in class folders. Put them in {split}/<class name>/, or remove {folder}."
            )
        return files, labels

    def _entries(self, split: str) -> list[tuple[str, int, int]]:
        """The split's listing as it is now: compared with the one its cache is decoded from."""
        listing = self._listing(split)
        return listing[0] if listing else []

    def _cache(self, split: str) -> tuple[Path, dict] | None:
        """The split's cache folder and its meta.json, decoded now if missing, out of date or damaged; None if
        there is no such split.

        Once per process: prepare_data and setup run in the same one, and listing a folder is not free."""
        if split not in self._folders:
            listing = self._listing(split)
            if listing is None:
                self._folders[split] = None
                return None
            entries, labels = listing
            where = hashlib.sha1(str(self.root.resolve()).encode()).hexdigest()[:6]
            name = f"{self.root.resolve().name}-{where}-{split}"
            source = image_cache.Source(self.root / split, entries, labels, partial(self._entries, split))
            self._folders[split] = image_cache.build(self.cache_dir, name, source, self.settings)
        return self._folders[split]

    def fetch(self) -> None:
        # One process per node, before setup (prepare_data): the ranks then only map the files.
        for split in SPLITS:
            self._cache(split)

    def _load(self, split: str) -> tuple[torch.Tensor, torch.Tensor, dict] | None:
        if split not in self._loaded:
            cached = self._cache(split)
            self._loaded[split] = None if cached is None else image_cache.load(*cached, self.settings)
            if cached is not None and (skipped := self._loaded[split][2]["skipped"]):
                log.warning(
                    "data.skip_bad: left out %d unreadable image(s) of %s/, e.g. %s", len(skipped), split, skipped[0]
                )
            if split == "val" and cached is not None:
                log.info("%s holds the validation images: data.val_size is not used", self.root / "val")
        return self._loaded[split]

    @property
    def skipped(self) -> dict[str, int]:
        """How many unreadable images each loaded split left out (data.skip_bad=true)."""
        return {split: len(loaded[2]["skipped"]) for split, loaded in self._loaded.items() if loaded}

    def files(self, split: str) -> list[str]:
        """The files of `split`, in the order of `read(split)` (unreadable ones left out)."""
        return self._load(split)[2]["files"]

    def read(self, split: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        loaded = self._load(split)
        return None if loaded is None else loaded[:2]

    def channel_stats(self) -> tuple[list[float], list[float]]:
        meta = self._load("train")[2]  # computed once, when the split was decoded
        return meta["mean"], meta["std"]
