"""The training loss: cross-entropy with optional class weights, label smoothing, and hard or soft targets.

`model.class_weights` counters an imbalanced train split: `auto` weighs each class by its inverse frequency in
the split, normalized to mean 1 so the loss keeps its scale (and the learning rate its meaning); a list gives
one weight per class, label 0 first. Soft targets come from mixup and cutmix (brisk.data.mixing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from brisk.errors import BriskError

AUTO, NONE = "auto", "none"


def class_weights(spec: str | Sequence[float] | None, num_classes: int) -> torch.Tensor | None:
    """`model.class_weights` as a float tensor: None for `none`, the list's weights, or ones for `auto` (filled
    in from the train split by `inverse_frequency` when fit starts, and restored from a checkpoint)."""
    if spec is None or spec == NONE:
        return None
    if spec == AUTO:
        return torch.ones(num_classes)
    fix = f"Give auto, none, or {num_classes} positive numbers, label 0 first: model.class_weights=[1.0, 2.5, ...]."
    if isinstance(spec, str) or not isinstance(spec, Sequence):
        raise BriskError(f"model.class_weights={spec!r} is not a list of weights. {fix}")
    numbers = all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in spec)
    if len(spec) != num_classes or not numbers or not all(math.isfinite(w) and w > 0 for w in spec):
        raise BriskError(
            f"model.class_weights={list(spec)} must hold {num_classes} finite positive numbers (the data has "
            f"{num_classes} classes). {fix}"
        )
    return torch.tensor([float(w) for w in spec])


def inverse_frequency(counts: torch.Tensor) -> torch.Tensor:
    """count -> 1/count, normalized to mean 1 over the classes the split holds. A class with no training image
    gets 0: it is never a target (only label smoothing gives it any mass), and an infinite weight would be NaN."""
    counts = counts.double()
    present = counts > 0
    inverse = torch.where(present, 1.0 / counts.clamp(min=1), 0.0)
    return (inverse * present.sum() / inverse.sum()).float()


def cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, label_smoothing: float
) -> torch.Tensor:
    """`F.cross_entropy` for int labels; for soft targets (class probabilities) the same weighted mean.

    With weights, PyTorch divides a batch's summed loss by the summed weight of its labels for int labels, but by
    the batch size for probabilities. Soft targets here are divided by their summed weight, sum_i sum_c w_c t_ic
    (before smoothing), which is the labels' summed weight when the targets are one-hot: mixing a batch changes
    neither the loss's scale nor how weights and label smoothing combine.
    """
    if not target.is_floating_point():
        return F.cross_entropy(logits, target, weight=weight, label_smoothing=label_smoothing)
    dtype = torch.promote_types(logits.dtype, target.dtype)  # 16-true logits, float32 targets: in float32
    logits, target = logits.to(dtype), target.to(dtype)
    if weight is None:
        return F.cross_entropy(logits, target, label_smoothing=label_smoothing)
    weight = weight.to(dtype)
    total = F.cross_entropy(logits, target, weight=weight, label_smoothing=label_smoothing, reduction="sum")
    return total / (target @ weight).sum()
