"""How sparse a model is, and state dicts without pruning's reparametrisation.

torch.nn.utils.prune replaces a pruned `weight` by a parameter `weight_orig` and a buffer `weight_mask`
(the effective weight is their product). A state dict holding those keys does not load into a freshly
built net, so brisk folds them back into `weight` before a checkpoint is written.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def sparsity(model: nn.Module) -> dict[str, Any]:
    """The fraction of exact zeros in each weight with >= 2 dims (conv filters, linear matrices), and overall."""
    layers, zeros, total = {}, 0, 0
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.ndim >= 2:
            z, n = int((weight == 0).sum()), weight.numel()
            layers[f"{name}.weight"] = z / n
            zeros, total = zeros + z, total + n
    return {"total": zeros / total if total else 0.0, "layers": layers}


def fold_masks(tree: Any) -> None:
    """In every dict nested in `tree` (a checkpoint), replace each `<x>_orig`, `<x>_mask` pair by `<x>` = their product.

    A checkpoint holds the model's state dict and also copies (EMA's raw weights, SWA's average), so all are walked.
    """
    if not isinstance(tree, dict):
        return
    for key in [k for k in tree if isinstance(k, str) and k.endswith("_mask") and k[:-5] + "_orig" in tree]:
        name = key[:-5]
        orig, mask = tree.pop(name + "_orig"), tree.pop(key)
        tree[name] = orig * mask.to(orig.dtype)
    for value in tree.values():
        fold_masks(value)
