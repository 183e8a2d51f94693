"""TensorDataModule: the fast path every brisk dataset shares.

A dataset subclass says only what its splits hold (`read`) and what its classes are called
(`class_names`). This base does the rest: the val split, `train_size` and `dedup`, channel
statistics, TensorBatchLoader batches (exact DDP shards, exact resume), and augmentation plus
normalization on the training device in `on_after_batch_transfer`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import NamedTuple

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from brisk.data import augment as aug
from brisk.data import splits
from brisk.data.augment_ops import Augmentation
from brisk.data.checks import augment_fits, batch_fits, read_errors, readable_folder, say_dropped
from brisk.data.loader import TensorBatchLoader
from brisk.errors import check, check_flag
from brisk.utils.config import plain
from brisk.utils.threads import small_ops

log = logging.getLogger("brisk")


class Split(NamedTuple):
    images: torch.Tensor  # uint8 N x 3 x H x W, possibly memory-mapped: indexed, never copied whole
    rows: torch.Tensor  # int64: the rows of `images` that belong to this split
    labels: torch.Tensor  # int64, one per entry of `rows`


def whole(images: torch.Tensor, labels: torch.Tensor) -> Split:
    return Split(images, torch.arange(len(labels)), labels)


class TensorDataModule(L.LightningDataModule):
    """The shared base. Its arguments are every dataset's `data.*` keys.

    Args:
        batch_size: the global batch, split evenly across devices.
        val_size: images held out of the train split for validation: a count, or a fraction such as 0.1
            (a fixed split, see `split_seed`). Unused by datasets that have their own val split.
        split_seed: seeds the val split and the `train_size` subset only, so changing the run's seed keeps them.
        eval_batch_size: the global batch for val and test; defaults to `batch_size`.
        augment: augmentation op -> its argument (brisk.data.augment_ops), applied to training batches on the
            device; the mixing ops (mixup_alpha, cutmix_alpha) after normalization, with the labels.
        channels_last: inputs (and, by the builder, the model) in channels_last: faster convolutions on tensor cores.
        train_size: train on a fixed subset of this many images (or this fraction), taken after the val split.
        dedup: drop exact duplicate images from the train split before the val split is taken.
        balanced: draw each training epoch class-balanced, with replacement (TensorBatchLoader's `balanced`).
        resident: hold each split on the training device, as uint8, copied there once when its loader is made
            (before training starts, so outside every clock): each batch is then an index_select on the device,
            with no copy from the host. CIFAR-10's splits take 184 MB. The batches are the same as without it.

    `augment.flip: alternate` mirrors each training image in every other epoch (TensorBatchLoader's
    `flip_phase`); outside a training epoch (brisk-train +show=augment) it is a random flip.
    """

    def __init__(
        self,
        batch_size: int = 512,
        val_size: int | float = 5000,
        split_seed: int = 0,
        eval_batch_size: int | None = None,
        augment: dict | None = None,
        channels_last: bool = False,
        train_size: int | float | None = None,
        dedup: bool = False,
        balanced: bool = False,
        resident: bool = False,
    ) -> None:
        super().__init__()
        check("data.val_size", val_size, lambda v: v >= 0, "a number >= 0 (images, or a share of train below 1)")
        check("data.split_seed", split_seed, lambda v: v >= 0, "a whole number >= 0", int)
        check_flag("data.balanced", balanced)
        check_flag("data.resident", resident)
        self.save_hyperparameters()  # with the subclass's own arguments (Lightning collects the whole __init__ chain)
        # Plain containers: checkpoints hold these and load with weights_only=True.
        self.hparams.update({k: plain(v) for k, v in self.hparams.items()})
        self.hparams.augment = self.hparams.augment or {}
        # Built once, not per batch; every key checked here, before anything is read (brisk.data.augment_ops).
        self.augmentation = Augmentation(self.hparams.augment)
        self.alternating_flip = self.augmentation.alternating
        # resident: the splits as placed on the device, and the device when no Trainer says (the lab's plain loop)
        self._placed: dict[str, tuple[torch.device, tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]] = {}
        self.resident_device = torch.device("cpu")
        self.splits: dict[str, Split | None] = {}
        # Per-channel mean and std on the 0..255 scale; from the data at setup, or from a checkpoint.
        self.mean: list[float] | None = None
        self.std: list[float] | None = None
        self.dedup_report: dict[str, int] | None = None
        # The run's seed (brisk-train seeds before building), the same on every rank: it orders each epoch,
        # so the ranks' strided shards of one permutation are disjoint.
        self.order_seed = torch.initial_seed()

    # --- what a dataset provides -------------------------------------------------------------------------

    @property
    def class_names(self) -> list[str]:
        """The class names, label i first. Known without reading the images: the builder sizes the model by it."""
        raise NotImplementedError

    @property
    def image_size(self) -> int:
        """Height and width of every image (images are square)."""
        raise NotImplementedError

    def read(self, split: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The whole `split` ("train", "val" or "test") as (uint8 N x 3 x H x W, int64 labels), or None if the
        dataset has no such split (no val: it is taken from train; no test: testing is skipped)."""
        raise NotImplementedError

    def channel_stats(self) -> tuple[list[float], list[float]]:
        """Mean and std per channel (0..255) of the training images. A dataset with published values returns them."""
        images, _ = self._read_train()
        return splits.channel_stats(images)

    def fetch(self) -> None:
        """Download, generate or cache what `read` reads; once, in one process (prepare_data). Nothing by default."""

    # --- the rest is shared -------------------------------------------------------------------------------

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def _read_train(self) -> tuple[torch.Tensor, torch.Tensor]:
        if not hasattr(self, "_train"):
            self._train = self.read("train")
        return self._train

    def prepare_data(self) -> None:
        """Lightning's hook, run by one process before any `setup`: data.root checked first, then `fetch`."""
        with read_errors():
            if self.hparams.get("root") is not None:
                readable_folder(str(self.hparams.root), "data.root")
            self.fetch()

    def setup(self, stage: str | None = None) -> None:
        with read_errors():
            if stage in ("fit", "validate", None) and "train" not in self.splits:
                self._split_train()
                augment_fits(self.hparams.augment, self.image_size)
                say_dropped(len(self.splits["train"].rows), self.hparams.batch_size, self.world_size)
            if stage in ("fit", None) and self.trainer is not None:
                self._log_each_epoch(self.trainer)
            if stage in ("test", None) and "test" not in self.splits:
                test = self.read("test")
                self.splits["test"] = None if test is None else whole(*test)
                if test is None:
                    rank_zero_warn(f"{type(self).__name__} has no test split: the test stage is skipped.")
            if self.mean is None:  # a checkpoint's values, restored later by Lightning, take precedence
                self.mean, self.std = self.channel_stats()

    def _split_train(self) -> None:
        images, labels = self._read_train()
        rows = torch.arange(len(labels))
        if self.hparams.dedup:
            rows = self._dedup(images, rows)
        g = torch.Generator().manual_seed(self.hparams.split_seed)
        own_val = self.read("val")
        if own_val is None:
            n_val = splits.count(self.hparams.val_size, len(rows), "data.val_size", high=len(rows) - 1)
            order = rows[torch.randperm(len(rows), generator=g)]
            rows, val_rows = order[n_val:], order[:n_val]
            self.splits["val"] = Split(images, val_rows, labels[val_rows])
        else:
            self.splits["val"] = whole(*own_val)
        if self.hparams.train_size is not None:
            n = splits.count(self.hparams.train_size, len(rows), "data.train_size", low=1)
            rows = rows[torch.randperm(len(rows), generator=g)[:n]]
        self.splits["train"] = Split(images, rows, labels[rows])

    def train_steps(self) -> int:
        """Training batches an epoch on each rank, after setup: drop_last trains whole batches only."""
        batch = self.per_device(self.hparams.batch_size, "data.batch_size")
        return len(self.splits["train"].rows) // self.world_size // batch

    def _log_each_epoch(self, trainer: L.Trainer) -> None:
        """Lightning logs the step values every log_every_n_steps optimizer steps, and warns on every run whose epoch
        is shorter (make demo's included): log at least once an epoch instead (limit_train_batches as Lightning
        reads it)."""
        batches, limit = self.train_steps(), trainer.limit_train_batches
        batches = min(batches, limit) if isinstance(limit, int) else max(1, int(batches * limit))
        steps = max(1, batches // trainer.accumulate_grad_batches)
        trainer.log_every_n_steps = min(trainer.log_every_n_steps, steps)

    def _dedup(self, images: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        kept, seen = splits.first_copies(images, rows)
        test = self.read("test")
        in_test = 0
        if test is not None:
            in_test = len(seen.intersection(splits.digests(test[0], torch.arange(len(test[1])))))
        self.dedup_report = {"dropped": len(rows) - len(kept), "kept": len(kept), "also_in_test": in_test}
        rank_zero_info(
            f"data.dedup: dropped {len(rows) - len(kept)} exact duplicate image(s) from the train split "
            f"({len(rows)} -> {len(kept)}); {in_test} distinct train image(s) also appear in the test split."
        )
        return kept

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    def per_device(self, global_batch: int, key: str) -> int:
        # that it splits evenly is checked once, before any process starts (brisk.run.checks.batch_split)
        return global_batch // self.world_size

    def _loader(self, split: str, train: bool) -> TensorBatchLoader:
        if train:
            batch = self.per_device(self.hparams.batch_size, "data.batch_size")
        else:
            global_eval = self.hparams.eval_batch_size or self.hparams.batch_size
            batch = self.per_device(global_eval, "data.eval_batch_size")
        trainer = self.trainer
        images, rows, labels = self.placed(split)
        flip_phase = None
        if train and self.alternating_flip:  # each sample's flip in even epochs, the same on every rank
            g = torch.Generator().manual_seed((self.order_seed + 7) % 2**63)
            flip_phase = (torch.rand(len(labels), generator=g) < 0.5).to(labels.device)
        return TensorBatchLoader(
            images,
            labels,
            batch_size=batch,
            shuffle=train,
            drop_last=train,
            rank=trainer.global_rank if trainer is not None else 0,
            world_size=self.world_size,
            seed=self.order_seed,
            epoch_fn=lambda: trainer.current_epoch if trainer is not None else 0,
            rows=rows,
            balanced=train and self.hparams.balanced,
            flip_phase=flip_phase,
        )

    def placed(self, split: str) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(images, rows, labels) of `split` as set up, or once on the device if resident and it fits (rows None)."""
        if not self.hparams.get("resident"):
            return self.splits[split]
        device = self.trainer.strategy.root_device if self.trainer is not None else self.resident_device
        if split not in self._placed or self._placed[split][0] != device:  # a split that did not fit: said once
            from brisk.data.resident import place  # only where data.resident=true

            self._placed[split] = (device, place(split, *self.splits[split], device) or self.splits[split])
        return self._placed[split][1]

    def train_dataloader(self) -> TensorBatchLoader:
        # where the batch meets the split: showing or evaluating a small folder at the default batch is fine
        batch_fits(self.hparams.batch_size, len(self.splits["train"].rows), self.hparams.val_size)
        return self._loader("train", train=True)

    def val_dataloader(self) -> TensorBatchLoader | list:
        return self._loader("val", train=False) if len(self.splits["val"].rows) else []

    def test_dataloader(self) -> TensorBatchLoader | list:
        return self._loader("test", train=False) if self.splits.get("test") is not None else []

    def class_counts(self) -> torch.Tensor:
        """Images per class in the train split as trained on (after the val split, dedup, train_size), after setup."""
        return torch.bincount(self.splits["train"].labels, minlength=self.num_classes)

    def tensors(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """A split's images (copied out of the dataset's tensor) and labels, after setup."""
        images, rows, labels = self.splits[split]
        return images.index_select(0, rows), labels

    def prepare_batch(self, x: torch.Tensor, train: bool, flips: torch.Tensor | None = None) -> torch.Tensor:
        """A uint8 batch on its device -> augmented (if `train`; `flips`: the images to mirror, else random),
        normalized float, in the configured layout."""
        if train:
            x = self.augmentation.per_image(x, flips)
        return aug.normalize(x, self.mean, self.std, channels_last=self.hparams.channels_last)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        x, y, *flips = batch  # the loader's third tensor: alternating flips
        train = self.trainer is not None and self.trainer.training
        with small_ops(x.device):  # on busy CPU cores, 2 spin-waiting threads take 10-100x longer (utils.threads)
            x = self.prepare_batch(x, train=train, flips=flips[0] if flips else None)
            if train and self.mixer is not None:
                x, y = self.mixer(x, y)  # y becomes class probabilities
        if self.trainer is not None:  # 16-true, bf16-true and 64 want the inputs in their dtype too
            x = self.trainer.precision_plugin.convert_input(x)
        return x, y

    @functools.cached_property
    def mixer(self) -> Callable | None:
        return self.augmentation.mixer(self.num_classes)

    def state_dict(self) -> dict:
        """In every checkpoint: the normalization the model was trained with, for eval, predict and export."""
        return {"mean": self.mean, "std": self.std, "class_names": self.class_names}

    def load_state_dict(self, state_dict: dict) -> None:
        self.mean, self.std = list(state_dict["mean"]), list(state_dict["std"])
