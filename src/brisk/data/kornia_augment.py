"""Why the float ops of brisk.data.augment_ops (rotation, scale, colour jitter, TrivialAugment, random erasing)
are Kornia's, and the per-image choice TrivialAugment needs.

Why Kornia and not torchvision's v2 transforms: on a batch tensor, v2's RandomRotation, RandomAffine,
RandomResizedCrop, ColorJitter, RandomErasing, RandAugment and TrivialAugmentWide each draw one set of parameters
per call and apply it to every image (checked on torchvision 0.29.1: eight equal inputs give eight equal outputs),
so per-image randomness would need a Python loop over the images. Kornia's draw one set per image
(`same_on_batch=False`). Kornia's TrivialAugment picks one operation per batch, though (its magnitudes are per
image), so `policy` below gives each image its own operation: the batch is shuffled, cut into one slice per
operation with multinomial sizes drawn on the host (no device sync), and each slice goes through its operation.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class PerImageChoice(nn.Module):
    """Each image through one of `ops`, chosen uniformly and independently per image."""

    def __init__(self, ops: list[nn.Module]) -> None:
        super().__init__()
        self.ops = nn.ModuleList(ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        # iid choices = multinomial slice sizes + a uniform shuffle; the sizes are host numbers, so no sync
        sizes = torch.multinomial(torch.ones(len(self.ops)), n, replacement=True).bincount(minlength=len(self.ops))
        order = torch.randperm(n, device=x.device)
        out = torch.empty_like(x)
        start = 0
        for op, size in zip(self.ops, sizes.tolist(), strict=True):
            if size:
                rows = order[start : start + size]
                out.index_copy_(0, rows, op(x.index_select(0, rows)))
                start += size
        return out
