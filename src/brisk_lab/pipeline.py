"""Input pipeline: brisk's loader and batched augmentation against the classic per-sample PIL pipeline.

Both read the same images (the DataModule's train split), shuffle, crop with 4 px of padding, flip,
normalise and deliver float batches on the training device. The classic side is what the
torchvision CIFAR-10 tutorial does: a Dataset that makes a PIL image per sample, RandomCrop,
RandomHorizontalFlip, ToTensor, Normalize, and a DataLoader with worker processes that collates.
Its workers are started before timing (persistent_workers), which favours it.
"""

from __future__ import annotations

import time

import torch
from omegaconf import DictConfig
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from brisk import BriskError, build_datamodule
from brisk_lab.clock import sync
from brisk_lab.plain import device_of
from brisk_lab.stats import in_turn, median, paired_ratio, spread


class ClassicCIFAR(Dataset):
    """Per sample, what torchvision.datasets.CIFAR10 does: an HWC uint8 array -> PIL image -> transform."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform) -> None:
        self.data = images.permute(0, 2, 3, 1).contiguous().numpy()  # N x 32 x 32 x 3, as torchvision keeps it
        self.targets = labels.tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


def classic_transform(crop_pad: int, flip: bool, size: int, mean: list[float], std: list[float]) -> T.Compose:
    steps = [T.RandomCrop(size, padding=crop_pad)] if crop_pad else []
    steps += [T.RandomHorizontalFlip()] if flip else []
    mean = [m / 255 for m in mean]
    std = [s / 255 for s in std]
    return T.Compose([*steps, T.ToTensor(), T.Normalize(mean, std)])


def _timed_pass(batches, prepare, device: torch.device) -> float:
    """Images per second delivered by one pass over `batches`, each finished by `prepare` on `device`."""
    sync(device)
    start, images = time.perf_counter(), 0
    for x, y in batches:
        x = prepare(x.to(device, non_blocking=True))
        y = y.to(device, non_blocking=True)
        images += len(y)
    sync(device)
    return images / (time.perf_counter() - start)


def compare(cfg: DictConfig, workers: int, rounds: int) -> dict:
    """Interleaved rounds of one pass each over the train split, after one warm-up pass of each."""
    device, batch_size = device_of(cfg), cfg.data.batch_size
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    images, labels = datamodule.tensors("train")
    augment = {k: v for k, v in datamodule.hparams.augment.items() if v not in (0, None, False)}  # the ones on
    if set(augment) - {"crop_pad", "flip"}:
        raise BriskError("augment: the pipeline comparison has crop and flip on both sides. Use augment=standard.")

    def brisk_prepare(x: torch.Tensor) -> torch.Tensor:
        return datamodule.prepare_batch(x, train=True)

    classic = DataLoader(
        ClassicCIFAR(
            images,
            labels,
            classic_transform(
                augment.get("crop_pad", 0),
                augment.get("flip", False),
                images.shape[-1],
                datamodule.mean,
                datamodule.std,
            ),
        ),
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=device.type == "cuda",
    )
    sides = {
        "classic": lambda: _timed_pass(classic, lambda x: x, device),
        "brisk": lambda: _timed_pass(datamodule.train_dataloader(), brisk_prepare, device),
    }
    for run in sides.values():  # warm-up: start the workers, fault in memory, fill caches
        run()
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in in_turn(sides, r):
            rates[name].append(sides[name]())
    return {
        "device": str(device),
        "images": len(labels),
        "batch_size": batch_size,
        "workers": workers,
        "augment": augment,
        "classic_images_per_sec": median(rates["classic"]),
        "brisk_images_per_sec": median(rates["brisk"]),
        "ratio": paired_ratio(rates["brisk"], rates["classic"]),
        "spread": max(spread(v) for v in rates.values()),
        "rounds": rates,
    }
