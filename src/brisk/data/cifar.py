"""CIFAR-10 from `root/cifar-10-batches-py`, and generated data in the same format (`data=synthetic`)."""

from __future__ import annotations

from pathlib import Path

import torch

from brisk.data import cifar_files as cf
from brisk.data.base import TensorDataModule
from brisk.errors import BriskError, check
from brisk.registry import DATASETS

MULTIPLE = "a multiple of 5 in 5..10**8 (5 batch files)"


class _CifarFormat(TensorDataModule):
    """What both read: the CIFAR-10 python batches in `self.folder / cifar-10-batches-py`, 32 x 32, 10 classes."""

    folder: Path

    @property
    def image_size(self) -> int:
        return cf.IMAGE_SIZE

    def read(self, split: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None if split == "val" else cf.read_split(self.folder, train=split == "train")

    def channel_stats(self) -> tuple[list[float], list[float]]:
        # CIFAR-10's published values, as every CIFAR-10 result uses. data=synthetic stands in for CIFAR-10
        # (offline runs, the lab), so it normalizes the same way; computed from its own images instead, the
        # DDP-equals-one-process weights of test_equivalence drift past its 1e-5 tolerance (2.3e-5, float noise).
        return list(cf.MEAN), list(cf.STD)


@DATASETS.register("cifar10")
class CIFAR10DataModule(_CifarFormat):
    """CIFAR-10: 50,000 training and 10,000 test images; downloaded once.

    Args:
        root: the folder holding `cifar-10-batches-py/`.
        download: fetch the official archive if the files are missing.
        **common: the keys every dataset shares (`brisk.data.base.TensorDataModule`).
    """

    def __init__(self, root: str = "data", download: bool = True, **common) -> None:
        super().__init__(**common)

    @property
    def folder(self) -> Path:
        return Path(self.hparams.root)

    @property
    def class_names(self) -> list[str]:
        return list(cf.CLASS_NAMES)

    def fetch(self) -> None:
        if cf.is_present(self.folder):
            return
        cf.check_not_partial(self.folder)
        if not self.hparams.download:
            raise BriskError(
                f"CIFAR-10 not found in {self.folder / cf.FOLDER} and data.download=false. "
                f"Put {cf.FOLDER}/ there, set data.root to where it is, or run with data=synthetic."
            )
        cf.download(self.folder)


@DATASETS.register("synthetic")
class SyntheticDataModule(_CifarFormat):
    """Generated images in the CIFAR-10 file format (`brisk.data.synthetic`), read by the same reader.

    Args:
        synthetic: `brisk.data.synthetic.write` arguments (n_train, n_test, seed, noise).
        root: the folder under which generated sets are cached, one sub-folder per parameter set.
        **common: the keys every dataset shares (`brisk.data.base.TensorDataModule`).
    """

    def __init__(self, synthetic: dict, root: str = "data", **common) -> None:
        get = dict(synthetic).get
        # 5 batch files of equal size, as CIFAR-10's; 10**8 images is ~300 GB, far past any test
        check("data.synthetic.n_train", get("n_train"), lambda v: 5 <= v <= 10**8 and v % 5 == 0, MULTIPLE, int)
        check("data.synthetic.n_test", get("n_test"), lambda v: 1 <= v <= 10**8, "a whole number in 1..10**8", int)
        check("data.synthetic.noise", get("noise", 0.25), lambda v: v >= 0, "a number >= 0")
        super().__init__(**common)

    @property
    def folder(self) -> Path:
        from brisk.data import synthetic  # only where data=synthetic: a CIFAR-10 run never generates

        return synthetic.cache_folder(self.hparams.root, **self.hparams.synthetic)

    @property
    def class_names(self) -> list[str]:
        return [f"class_{i}" for i in range(cf.NUM_CLASSES)]

    def fetch(self) -> None:
        from brisk.data import synthetic

        synthetic.write(self.folder, **self.hparams.synthetic)
