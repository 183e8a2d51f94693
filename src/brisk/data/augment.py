"""Batched augmentation on the training device, on whole uint8 batches.

No per-sample Python and no PIL: every op below is a handful of tensor ops per batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# CIFAR-10 channel statistics of the training split, on the 0..255 scale.
MEAN = (125.31, 122.95, 113.87)
STD = (62.99, 62.09, 66.70)


def random_crop(x: torch.Tensor, pad: int) -> torch.Tensor:
    """Pad by `pad` with zeros and crop back to the input size at a random offset per image.

    Rather than gathering every pixel, images are grouped by offset, one axis at a time: 2 x (2*pad+1)
    slice copies per batch instead of an N x H x W index tensor.
    """
    if pad <= 0:
        return x
    n, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    offsets = torch.randint(0, 2 * pad + 1, (2, n), device=x.device)
    rows = torch.empty_like(padded[:, :, :h, :])
    for dy in range(2 * pad + 1):
        idx = (offsets[0] == dy).nonzero().squeeze(1)
        rows[idx] = padded[idx, :, dy : dy + h, :]
    out = torch.empty_like(x)
    for dx in range(2 * pad + 1):
        idx = (offsets[1] == dx).nonzero().squeeze(1)
        out[idx] = rows[idx, :, :, dx : dx + w]
    return out


def random_flip(x: torch.Tensor) -> torch.Tensor:
    """Mirror a random half of the batch left-right."""
    flip = torch.rand(x.shape[0], 1, 1, 1, device=x.device) < 0.5
    return torch.where(flip, x.flip(3), x)


def cutout(x: torch.Tensor, size: int) -> torch.Tensor:
    """Zero one `size` x `size` square per image at a random centre (DeVries & Taylor 2017: 16 px on CIFAR-10)."""
    if size <= 0:
        return x
    n, _, h, w = x.shape
    cy = torch.randint(0, h, (n, 1, 1), device=x.device)
    cx = torch.randint(0, w, (n, 1, 1), device=x.device)
    ys = torch.arange(h, device=x.device).view(1, h, 1)
    xs = torch.arange(w, device=x.device).view(1, 1, w)
    y0, x0 = cy - size // 2, cx - size // 2  # the square may hang over the border, as in the paper
    hole = (ys >= y0) & (ys < y0 + size) & (xs >= x0) & (xs < x0 + size)
    return x.masked_fill(hole.unsqueeze(1), 0)


def augment(x: torch.Tensor, crop_pad: int = 0, flip: bool = False, cutout_size: int = 0) -> torch.Tensor:
    x = random_crop(x, crop_pad)
    if flip:
        x = random_flip(x)
    return cutout(x, cutout_size)


def normalize(x: torch.Tensor, dtype: torch.dtype = torch.float32, channels_last: bool = False) -> torch.Tensor:
    mean = torch.tensor(MEAN, device=x.device, dtype=dtype).view(1, 3, 1, 1)
    inv_std = 1.0 / torch.tensor(STD, device=x.device, dtype=dtype).view(1, 3, 1, 1)
    x = (x.to(dtype) - mean) * inv_std
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x
