"""Batched augmentation: shapes and dtypes kept, a crop is a translation of the padded image, a flip mirrors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from brisk.data import augment as aug


def _images(n=64):
    torch.manual_seed(0)
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)


def test_shape_and_dtype_are_kept():
    x = _images()
    for kwargs in [
        {},
        {"crop_pad": 4},
        {"flip": True},
        {"cutout_size": 8},
        {"crop_pad": 4, "flip": True, "cutout_size": 16},
    ]:
        y = aug.augment(x, **kwargs)
        assert y.shape == x.shape and y.dtype == torch.uint8


def test_crop_is_a_translation_of_the_padded_image():
    x = _images()
    y = aug.random_crop(x, pad=4)
    padded = F.pad(x, (4, 4, 4, 4))
    offsets = set()
    for i in range(len(x)):
        windows = [
            (dy, dx)
            for dy in range(9)
            for dx in range(9)
            if torch.equal(padded[i, :, dy : dy + 32, dx : dx + 32], y[i])
        ]
        assert windows, f"image {i} is not a 32x32 window of its padded original"
        offsets.add(windows[0])
    assert len(offsets) > 10, "offsets should vary across the batch"


def test_flip_mirrors_or_keeps_each_image():
    x = _images(200)
    y = aug.random_flip(x)
    flipped = [torch.equal(y[i], x[i].flip(2)) for i in range(len(x))]
    kept = [torch.equal(y[i], x[i]) for i in range(len(x))]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert 60 < sum(flipped) < 140


def test_cutout_zeroes_one_square_per_image():
    x = torch.full((32, 3, 32, 32), 7, dtype=torch.uint8)
    y = aug.cutout(x, 8)
    zeros = (y == 0).all(1)  # all channels
    for i in range(len(x)):
        rows, cols = zeros[i].nonzero(as_tuple=True)
        assert 0 < len(rows) <= 64
        assert len(rows) == (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1), "the hole is a rectangle"
    assert torch.equal(y[~(y == 0)], x[~(y == 0)])


def test_normalize():
    x = _images()
    y = aug.normalize(x, [127.0] * 3, [64.0] * 3, channels_last=True)
    assert y.dtype == torch.float32 and y.is_contiguous(memory_format=torch.channels_last)
    assert abs(y.mean().item()) < 0.5
