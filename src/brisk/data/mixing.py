"""Mixup and cutmix: augmentations of whole batches that mix pairs of images and, in the same proportion, their
labels, which so become class probabilities (soft targets, batch x classes, each row summing to 1).

They need the labels, so they run in TensorDataModule.on_after_batch_transfer on the training device, after
normalization: the two mixing weights sum to 1, so mixing normalized images equals normalizing mixed pixels.
torchvision's v2 MixUp and CutMix do the work on the batch's device. Each draws one lambda per batch from
Beta(alpha, alpha), as both papers do (Zhang et al. 2018; Yun et al. 2019), on the host from torch's global
generator (a float and a box, no device sync; RankSeed gives each rank its own draws, ResumeState restores them),
and pairs every image with its neighbour in the batch, which the loader has shuffled.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torchvision.transforms import v2

Mixer = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def mixer(num_classes: int, mixup_alpha: float | None = None, cutmix_alpha: float | None = None) -> Mixer | None:
    """(images, int labels) -> (mixed images, soft labels), or None when both are off (null). With both set,
    each batch gets one of the two, at even odds (timm's default switch probability, 0.5)."""
    mixes = []
    if mixup_alpha is not None:
        mixes.append(v2.MixUp(alpha=float(mixup_alpha), num_classes=num_classes))
    if cutmix_alpha is not None:
        mixes.append(v2.CutMix(alpha=float(cutmix_alpha), num_classes=num_classes))
    if not mixes:
        return None
    return mixes[0] if len(mixes) == 1 else v2.RandomChoice(mixes)
