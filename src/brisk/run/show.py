"""brisk-train ... +show=augment: a grid of training images before and after the run's augmentation, written to
augment.png in the run directory; then the run ends without training.

The images are the first of each class of the train split in turn (the first image of every class, then the
second, ...: an image folder lists its classes one after another, so its first 32 images are often of one class),
augmented as a training batch is (brisk.data.augment, seeded by the
run's seed), on the CPU. Mixup and cutmix mix normalized batches and their labels after this step: not drawn.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from torchvision.utils import save_image

from brisk.errors import BriskError
from brisk.run import checks
from brisk.run.builder import build_datamodule

VIEWS = ("augment",)
COLUMNS = 8  # images per row; each row of originals is followed by the row of the same images augmented
ROWS = 4
MIN_SIDE = 96  # small images are enlarged (nearest neighbour) to about this many pixels, so the grid can be read


def show(cfg: DictConfig) -> Path:
    if cfg.show not in VIEWS:
        raise BriskError(f"show={cfg.show}: there is no such view. Use +show={'|'.join(VIEWS)}.")
    checks.validate(cfg)
    L.seed_everything(cfg.seed)
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")  # refuses padding or cutout larger than the images (brisk.data.checks)
    images, rows, labels = datamodule.splits["train"]
    columns = min(COLUMNS, len(rows))
    shown = across_classes(labels)[: min(ROWS * columns, len(rows)) // columns * columns]
    before = images.index_select(0, rows[shown])
    after = datamodule.augmentation.per_image(before)
    pairs = torch.stack([t.view(-1, columns, *t.shape[1:]) for t in (before, after)], 1)  # rows, 2, columns, ...
    grid = pairs.flatten(0, 2).float().div_(255)
    factor = max(1, MIN_SIDE // grid.shape[-1])
    grid = grid.repeat_interleave(factor, -1).repeat_interleave(factor, -2)
    path = Path(HydraConfig.get().runtime.output_dir) / "augment.png"
    save_image(grid, path, nrow=columns, padding=2 * factor, pad_value=1.0)
    classes = len(labels[shown].unique())
    print(
        f"augment: {len(before)} training images of {classes} classes, each row followed by the same images augmented",
        file=sys.stderr,
    )
    print(path, flush=True)
    print(path.parent, flush=True)  # the last line, as for every run
    return path


def across_classes(labels: torch.Tensor) -> torch.Tensor:
    """Positions of the split's entries in turn by class: each class's first entry (classes in order), then each
    one's second, and so on; within a class, in the split's order."""
    order = torch.argsort(labels, stable=True)  # grouped by class, each group in the split's order
    grouped = labels[order]
    counts = torch.bincount(grouped)
    starts = torch.cumsum(counts, 0) - counts
    within = torch.arange(len(order)) - starts[grouped]  # the entry's place in its class
    return order[torch.argsort(within * len(counts) + grouped, stable=True)]
