"""What each training augmentation costs: one uint8 batch through the DataModule's `prepare_batch` (augment, then
normalize) and, for mixup and cutmix, its `mixer` (the images and their labels), as a training batch goes through
`on_after_batch_transfer`; timed for each `augment=` option on the training device, with torch's threads as the
lab has them.

The images are random bytes of the data's image size: crop, flip, a warp or a colour op cost the same whatever
the pixels hold. `none` is normalization alone, so a row minus `none` is its augmentation's cost, and a row minus
`standard` what it adds to the default crop and flip.
"""

from __future__ import annotations

import time

import torch
from omegaconf import DictConfig

from brisk import build_datamodule, sync
from brisk_lab.plain import device_of
from brisk_lab.progress import progress
from brisk_lab.stats import in_turn, median, spread


def compare(cfgs: dict[str, DictConfig], repeats: int, rounds: int) -> dict:
    """`cfgs`: augment option -> its config. Interleaved rounds, each `repeats` batches per option, after a warm-up."""
    first = next(iter(cfgs.values()))
    device, batch_size = device_of(first), first.data.batch_size
    datamodules = {}
    for option, cfg in cfgs.items():
        datamodule = build_datamodule(cfg)
        datamodule.mean, datamodule.std = [0.0] * 3, [1.0] * 3  # normalize needs statistics; no data is read
        datamodules[option] = datamodule
    side = datamodule.image_size
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch_size, 3, side, side), dtype=torch.uint8, generator=g).to(device)
    y = torch.randint(0, datamodule.num_classes, (batch_size,), generator=g).to(device)

    def timed(datamodule) -> float:
        sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            batch = datamodule.prepare_batch(x, train=True)
            if datamodule.mixer is not None:  # mixup, cutmix: after normalization, with the labels
                datamodule.mixer(batch, y)
        sync(device)
        return (time.perf_counter() - start) / repeats * 1e3

    for datamodule in datamodules.values():  # warm-up: Kornia's import, its ops' first calls
        timed(datamodule)
    ms: dict[str, list[float]] = {option: [] for option in datamodules}
    for r in range(rounds):
        progress(f"augment round {r + 1}/{rounds}")
        for option in in_turn(list(datamodules), r):
            ms[option].append(timed(datamodules[option]))
    none, standard = median(ms.get("none", [0.0])), median(ms.get("standard", [0.0]))
    rows = [
        {
            "option": option,
            "augment": {k: v for k, v in datamodules[option].hparams.augment.items() if v not in (0, None, False)},
            "ms_per_batch": median(times),
            "over_none_ms": median(times) - none,
            "over_standard_ms": median(times) - standard,
            "spread": spread(times),
        }
        for option, times in ms.items()
    ]
    return {
        "device": str(device),
        "batch_size": batch_size,
        "image_size": side,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        "rows": rows,
        "rounds": ms,
    }
