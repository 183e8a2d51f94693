"""Input pipeline: brisk's loader and batched augmentation against the classic per-sample PIL pipeline.

Both read the same images (the DataModule's train split), shuffle, crop with 4 px of padding, flip,
normalise and deliver float batches on the training device. The classic side is what the
torchvision CIFAR-10 tutorial does: a Dataset that makes a PIL image per sample, RandomCrop,
RandomHorizontalFlip, ToTensor, Normalize, and a DataLoader with worker processes that collates.
Its workers are started before timing (persistent_workers), which favours it.

A third side is brisk with `data.resident`: the split copied to the training device once (outside the timing),
each batch cut there, so no host-to-device copy per batch. On a CPU the device is the host, and the row shows
what cutting batches from one compact tensor costs; on a GPU it shows what the copy per batch costs.

With `loaded`, the same comparison runs again while 2 x os.cpu_count() busy-loop processes hold the cores, as
other jobs do on a shared machine, with a third side: brisk's batch ops on torch's default thread count instead
of brisk.utils.threads.small_ops' one thread, which shows what that choice is worth there.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import torch
from omegaconf import DictConfig, OmegaConf
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from brisk import BriskError, build_datamodule, small_ops
from brisk_lab.clock import sync
from brisk_lab.plain import device_of
from brisk_lab.progress import progress
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
    for x, y, *_ in batches:  # a third tensor: augment.flip=alternate's flips (prepare draws its own)
        x = prepare(x.to(device, non_blocking=True))  # a no-op for resident batches
        y = y.to(device, non_blocking=True)
        images += len(y)
    sync(device)
    return images / (time.perf_counter() - start)


def _gathered(images: torch.Tensor, labels: torch.Tensor, batch_size: int) -> Iterator[tuple[torch.Tensor, ...]]:
    """TensorBatchLoader's work on torch's own thread count: a shuffled pass of whole batches by index_select."""
    order = torch.randperm(len(labels))
    for i in range(len(labels) // batch_size):
        idx = order[i * batch_size : (i + 1) * batch_size]
        yield images.index_select(0, idx), labels.index_select(0, idx)


@contextlib.contextmanager
def busy_cores(processes: int) -> Iterator[None]:
    """`processes` Python busy loops for the block, killed after it whatever happens."""
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(processes):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL))
        time.sleep(0.5)  # past their start-up: spinning when the first pass starts
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def _rounds(sides: dict[str, Callable[[], float]], rounds: int, label: str = "pipeline") -> dict:
    """Images per second of each side, interleaved rounds of one pass each; medians and the paired ratio."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        progress(f"{label} round {r + 1}/{rounds}")
        for name in in_turn(sides, r):
            rates[name].append(sides[name]())
    out = {f"{name}_images_per_sec": median(v) for name, v in rates.items()}
    out["ratio"] = paired_ratio(rates["brisk"], rates["classic"])
    out["resident_ratio"] = paired_ratio(rates["brisk_resident"], rates["classic"])
    out["spread"] = max(spread(v) for v in rates.values())
    out["rounds"] = rates
    return out


def compare(cfg: DictConfig, workers: int, rounds: int, loaded: bool = False) -> dict:
    """Interleaved rounds of one pass each over the train split, after one warm-up pass of each; with `loaded`,
    as many rounds again on busy cores (module docstring), under `loaded`."""
    device, batch_size = device_of(cfg), cfg.data.batch_size
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    images, labels = datamodule.tensors("train")
    augment = {k: v for k, v in datamodule.hparams.augment.items() if v not in (0, None, False)}  # the ones on
    if set(augment) - {"crop_pad", "flip"}:
        raise BriskError("augment: the pipeline comparison has crop and flip on both sides. Use augment=standard.")

    def brisk_prepare(x: torch.Tensor) -> torch.Tensor:
        with small_ops(device):  # as in training (brisk.data.base, on_after_batch_transfer)
            return datamodule.prepare_batch(x, train=True)

    def default_threads_prepare(x: torch.Tensor) -> torch.Tensor:
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
    on_device = build_datamodule(OmegaConf.merge(cfg, {"data": {"resident": True}}))  # the same split, resident
    on_device.resident_device = device
    on_device.prepare_data()
    on_device.setup("fit")
    sides = {
        "classic": lambda: _timed_pass(classic, lambda x: x, device),
        "brisk": lambda: _timed_pass(datamodule.train_dataloader(), brisk_prepare, device),
        "brisk_resident": lambda: _timed_pass(on_device.train_dataloader(), brisk_prepare, device),
    }
    for run in sides.values():  # warm-up: start the workers, fault in memory, fill caches
        run()
    result = {
        "device": str(device),
        "images": len(labels),
        "batch_size": batch_size,
        "workers": workers,
        "augment": augment,
        **_rounds(sides, rounds),
    }
    if loaded:
        sides["brisk_default_threads"] = lambda: _timed_pass(
            _gathered(images, labels, batch_size), default_threads_prepare, device
        )
        busy = 2 * (os.cpu_count() or 1)
        with busy_cores(busy):
            load = _rounds(sides, rounds, "pipeline, loaded,")
            load_average = os.getloadavg()[0]  # the 1-minute average lags: read it after the rounds
        load.update(
            busy_processes=busy,
            load_average=round(load_average, 2),
            default_threads=torch.get_num_threads(),
            default_threads_ratio=paired_ratio(load["rounds"]["brisk_default_threads"], load["rounds"]["classic"]),
            over_default_threads=paired_ratio(load["rounds"]["brisk"], load["rounds"]["brisk_default_threads"]),
        )
        result["loaded"] = load
    return result
