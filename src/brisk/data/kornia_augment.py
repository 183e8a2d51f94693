"""Rotation, scale, colour jitter, TrivialAugment and random erasing: Kornia's batched augmentations, on the
training device, each image with its own random parameters.

brisk.data.augment calls this module only when one of these keys is on, and Kornia is imported only then: a run
without them neither imports Kornia nor does any work here (brisk.run.checks uses `check` alone).
Kornia works on float images in [0, 1]: a batch is converted once on the way in and once back to uint8 on the
way out (the crop, flip and cutout around it stay on uint8).

Why Kornia and not torchvision's v2 transforms: on a batch tensor, v2's RandomRotation, RandomAffine,
RandomResizedCrop, ColorJitter, RandomErasing, RandAugment and TrivialAugmentWide each draw one set of parameters
per call and apply it to every image (checked on torchvision 0.29.1: eight equal inputs give eight equal outputs),
so per-image randomness would need a Python loop over the images. Kornia's draw one set per image
(`same_on_batch=False`). Kornia's TrivialAugment picks one operation per batch, though (its magnitudes are per
image), so `policy` below gives each image its own operation: the batch is shuffled, cut into one slice per
operation with multinomial sizes drawn on the host (no device sync), and each slice goes through its operation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import torch
import torch.nn as nn
from omegaconf import ListConfig

from brisk.errors import BriskError

POLICIES = ("trivialaugment",)


def check(augment: Mapping | None) -> None:
    """Refuse a bad value of these keys in one line naming `data.augment.<key>` (the numbers' types and ranges are
    brisk.run.checks.VALUES rows; the range and the policy name are checked here)."""
    augment = augment or {}
    scale = augment.get("scale")
    if scale is not None:
        pair = list(scale) if isinstance(scale, (list, tuple, ListConfig)) else []
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in pair)
        if len(pair) != 2 or not numbers:
            raise BriskError(
                f"data.augment.scale={scale!r} must be a range [low, high], e.g. data.augment.scale=[0.9,1.1] "
                "(or null for none)."
            )
        if not 0 < pair[0] <= pair[1]:
            fix = sorted(pair) if min(pair) > 0 else [0.9, 1.1]
            raise BriskError(
                f"data.augment.scale={pair} must be a zoom range [low, high] with 0 < low <= high, "
                f"e.g. data.augment.scale=[{fix[0]},{fix[1]}]."
            )
    policy = augment.get("policy")
    if policy is not None and policy not in POLICIES:
        raise BriskError(
            f"data.augment.policy={policy!r} is not a policy brisk has. Use data.augment.policy="
            f"{'|'.join(POLICIES)}, or null for none."
        )


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


@functools.lru_cache(maxsize=8)
def pipeline(rotate, scale, color_jitter, policy, erasing, device: torch.device) -> nn.Module:
    """The Kornia ops for these values, built once per values and device (their samplers then draw there)."""
    import kornia.augmentation as K  # here: a run that uses none of these never imports Kornia
    from kornia.augmentation.auto import TrivialAugment

    ops: list[nn.Module] = []
    if rotate or scale is not None:  # one warp for both
        ops.append(K.RandomAffine(degrees=float(rotate), scale=scale, p=1.0))
    if color_jitter:
        ops.append(K.ColorJitter(brightness=color_jitter, contrast=color_jitter, saturation=color_jitter, p=1.0))
    if policy == "trivialaugment":
        ops.append(PerImageChoice(list(TrivialAugment().children())))
    if erasing:
        ops.append(K.RandomErasing(p=float(erasing)))
    return nn.Sequential(*ops).to(device)


@torch.no_grad()  # Kornia's policy ops hold their magnitudes as parameters: no graph through them
def apply(x: torch.Tensor, rotate=0, scale=None, color_jitter=0, policy=None, erasing=0) -> torch.Tensor:
    """uint8 N x C x H x W -> the same, through the ops that are on."""
    scale = None if scale is None else tuple(float(s) for s in scale)
    ops = pipeline(float(rotate), scale, float(color_jitter), policy, float(erasing), x.device)
    y = ops(x.float().div_(255))
    return y.mul_(255).round_().clamp_(0, 255).to(torch.uint8)
