"""Generated CIFAR-format data for offline runs and tests (`data=synthetic`).

Each class has its own smooth colour pattern; an image is its class pattern, randomly shifted,
scaled in contrast and covered in noise. A small CNN learns it in a few epochs, but not in one
step, so training curves mean something. The files use the official format and go through the
same reader as the real data.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from brisk.data import cifar_files as cf


def generate(n: int, seed: int, noise: float, num_classes: int = cf.NUM_CLASSES) -> tuple[torch.Tensor, torch.Tensor]:
    """n uint8 images (n x 3 x 32 x 32) and labels; the class patterns depend only on `num_classes`."""
    patterns_rng = torch.Generator().manual_seed(1234)
    # Low-frequency 4x4 colour grids, upsampled: structure a 3x3 conv stack can pick up.
    # Classes share most of their pattern and differ by a fainter part, so the task is not solved in one step.
    grids = 0.5 + 0.3 * (torch.rand(1, 3, 4, 4, generator=patterns_rng) - 0.5)
    grids = grids + 0.25 * (torch.rand(num_classes, 3, 4, 4, generator=patterns_rng) - 0.5)
    patterns = F.interpolate(grids, size=(32, 32), mode="bicubic", align_corners=False)
    rng = torch.Generator().manual_seed(seed)
    labels = torch.randint(num_classes, (n,), generator=rng)
    images = patterns[labels]
    shifts = torch.randint(-4, 5, (n, 2), generator=rng)
    for sy, sx in shifts.unique(dim=0).tolist():  # at most 81 groups, each one vectorised roll
        idx = ((shifts[:, 0] == sy) & (shifts[:, 1] == sx)).nonzero().squeeze(1)
        images[idx] = torch.roll(images[idx], shifts=(sy, sx), dims=(2, 3))
    contrast = 0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=rng)
    images = 0.5 + contrast * (images - 0.5) + noise * torch.randn(images.shape, generator=rng)
    return (images.clamp(0, 1) * 255).round().to(torch.uint8), labels


def cache_folder(base: str | Path, n_train: int, n_test: int, seed: int, noise: float) -> Path:
    """Where a generated set lives: one folder per parameter set, so changing a parameter regenerates."""
    key = json.dumps({"n_train": n_train, "n_test": n_test, "seed": seed, "noise": noise}, sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return Path(base) / f"synthetic-{n_train}-{n_test}-{digest}"


def write(root: str | Path, n_train: int, n_test: int, seed: int = 0, noise: float = 0.25) -> Path:
    """Write the set under `root` (if it is not there yet) and return that folder."""
    root = Path(root)
    if cf.is_present(root):
        return root
    cf.check_not_partial(root)
    with cf.staging_dir(root) as tmp:
        folder = Path(tmp) / cf.FOLDER
        folder.mkdir()
        x, y = generate(n_train, seed, noise)
        per = n_train // 5
        for i, name in enumerate(cf.TRAIN_FILES):
            cf.write_batch(folder / name, x[i * per : (i + 1) * per], y[i * per : (i + 1) * per], name)
        x, y = generate(n_test, seed + 1, noise)
        cf.write_batch(folder / cf.TEST_FILES[0], x, y, "testing batch 1 of 1")
        cf.write_meta(folder, [f"class_{i}" for i in range(cf.NUM_CLASSES)], per)
        cf.publish(Path(tmp), root)
    return root
