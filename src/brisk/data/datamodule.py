"""CIFAR10DataModule: the whole split in memory as uint8, batches by indexing, augmentation on the device."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from brisk.containers import plain
from brisk.data import augment as aug
from brisk.data import cifar_files as cf
from brisk.data import synthetic as syn
from brisk.data.loader import TensorBatchLoader
from brisk.errors import BriskError


class CIFAR10DataModule(L.LightningDataModule):
    """CIFAR-10 (or generated data in its format) from `root/cifar-10-batches-py`.

    Args:
        root: the folder holding `cifar-10-batches-py/`. With `synthetic`, the folder under which
            generated sets are cached, one sub-folder per parameter set.
        batch_size: the global batch, split evenly across devices.
        val_size: images of the train split held out for validation (a fixed split, see `split_seed`).
        split_seed: seeds the train/val split only, so changing the run's seed keeps the same val set.
        eval_batch_size: the global batch for val and test; defaults to `batch_size`.
        augment: keyword arguments of `brisk.data.augment.augment`, applied to training batches.
        channels_last: convert inputs and the model to channels_last (faster convolutions on tensor cores).
        download: fetch the official archive if the files are missing.
        synthetic: if set, generate data with these `brisk.data.synthetic.write` arguments.
    """

    def __init__(
        self,
        root: str = "data",
        batch_size: int = 512,
        val_size: int = 5000,
        split_seed: int = 0,
        eval_batch_size: int | None = None,
        augment: dict | None = None,
        channels_last: bool = False,
        download: bool = True,
        synthetic: dict | None = None,
    ) -> None:
        super().__init__()
        augment, synthetic = plain(augment) or {}, plain(synthetic)
        self.save_hyperparameters()
        self.splits: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        # The run's seed (brisk-train seeds before building), the same on every rank: it orders each epoch,
        # so the ranks' strided shards of one permutation are disjoint.
        self.order_seed = torch.initial_seed()

    @property
    def folder(self) -> Path:
        """The folder that holds `cifar-10-batches-py/`."""
        if self.hparams.synthetic is not None:
            return syn.cache_folder(self.hparams.root, **self.hparams.synthetic)
        return Path(self.hparams.root)

    def prepare_data(self) -> None:
        if self.hparams.synthetic is not None:
            syn.write(self.folder, **self.hparams.synthetic)
        elif not cf.is_present(self.folder):
            cf.check_not_partial(self.folder)
            if not self.hparams.download:
                raise BriskError(
                    f"CIFAR-10 not found in {self.folder / cf.FOLDER} and data.download=false. "
                    f"Put {cf.FOLDER}/ there, set data.root to where it is, or run with data=synthetic."
                )
            cf.download(self.folder)

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    def per_device(self, global_batch: int, key: str) -> int:
        if global_batch % self.world_size:
            raise BriskError(
                f"{key}={global_batch} does not split across {self.world_size} processes. "
                f"Use a multiple of {self.world_size}."
            )
        return global_batch // self.world_size

    def setup(self, stage: str | None = None) -> None:
        if stage == "fit" and self.world_size > 1:
            # Every rank was seeded alike; without this they would draw the same crops and flips for
            # their different images. (A resumed run then restores each rank's saved generators.)
            torch.manual_seed(self.order_seed + self.trainer.global_rank)
        if self.trainer is not None and self.hparams.channels_last:
            self.trainer.lightning_module.to(memory_format=torch.channels_last)
        if stage in ("fit", "validate", None) and "train" not in self.splits:
            x, y = cf.read_split(self.folder, train=True)
            n_val = self.hparams.val_size
            if not 0 <= n_val < len(y):
                raise BriskError(f"data.val_size={n_val} must be between 0 and {len(y) - 1}, the train split size.")
            order = torch.randperm(len(y), generator=torch.Generator().manual_seed(self.hparams.split_seed))
            self.splits["train"] = (x[order[n_val:]], y[order[n_val:]])
            self.splits["val"] = (x[order[:n_val]], y[order[:n_val]])
        if stage in ("test", None) and "test" not in self.splits:
            self.splits["test"] = cf.read_split(self.folder, train=False)

    def _loader(self, split: str, train: bool) -> TensorBatchLoader:
        if train:
            batch = self.per_device(self.hparams.batch_size, "data.batch_size")
        else:
            global_eval = self.hparams.eval_batch_size or self.hparams.batch_size
            batch = self.per_device(global_eval, "data.eval_batch_size")
        trainer = self.trainer
        return TensorBatchLoader(
            *self.splits[split],
            batch_size=batch,
            shuffle=train,
            drop_last=train,
            rank=trainer.global_rank if trainer is not None else 0,
            world_size=self.world_size,
            seed=self.order_seed,
            epoch_fn=lambda: trainer.current_epoch if trainer is not None else 0,
        )

    def train_dataloader(self) -> TensorBatchLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> TensorBatchLoader | list:
        return self._loader("val", train=False) if self.hparams.val_size else []

    def test_dataloader(self) -> TensorBatchLoader:
        return self._loader("test", train=False)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        x, y = batch
        if self.trainer is not None and self.trainer.training:
            x = aug.augment(x, **self.hparams.augment)
        x = aug.normalize(x, channels_last=self.hparams.channels_last)
        if self.trainer is not None:  # 16-true, bf16-true and 64 want the inputs in their dtype too
            x = self.trainer.precision_plugin.convert_input(x)
        return x, y
