"""The classifier's parameter groups: weight decay on weights only, and a backbone frozen or at a lower learning rate.

The backbone is every parameter of the net but its head, which a net names with `get_classifier()` (timm's
name; brisk.models.nets.TimmNet has it). A group's `lr_mult` scales the optimizer's learning rate for it, and it
stays in the optimizer's groups, so a checkpoint and a resume keep it.

Frozen means the backbone computes the same function all along: its parameters get no gradient, and its
BatchNorm layers become timm's FrozenBatchNorm2d, as timm.utils.freeze does. In train mode a BatchNorm would
normalize by each batch's statistics and move its running ones toward the new data, so a "frozen" backbone
would still change (and a linear probe train on features that drift). To adapt the norms too, fine-tune with
`backbone_lr_mult` < 1 instead.
"""

from __future__ import annotations

from torch import nn
from torch.optim import Optimizer

from brisk.errors import BriskError


def head_of(net: nn.Module, key: str) -> nn.Module:
    """The net's head, or one line naming `key` (the option that needs one)."""
    get = getattr(net, "get_classifier", None)
    if not callable(get):
        raise BriskError(
            f"{key} needs a net that names its head with get_classifier(), and {type(net).__name__} does not: "
            "use model=timm, or add get_classifier() to the net."
        )
    return get()


def check(net: nn.Module, freeze_backbone: bool, backbone_lr_mult: float) -> None:
    """Refuse, before training, a multiplier that is not a positive number, or either option on a headless net."""
    if isinstance(backbone_lr_mult, bool) or not isinstance(backbone_lr_mult, int | float) or backbone_lr_mult <= 0:
        raise BriskError(
            f"model.backbone_lr_mult={backbone_lr_mult}: give a positive number (1: the backbone trains at "
            "optimizer.lr; 0.1: at a tenth of it). To stop it training, use model.freeze_backbone=true."
        )
    if freeze_backbone:
        head_of(net, "model.freeze_backbone=true")
    elif backbone_lr_mult != 1:
        head_of(net, f"model.backbone_lr_mult={backbone_lr_mult}")


def freeze_backbone(net: nn.Module) -> None:
    """No gradient for any parameter outside the head, and the backbone's BatchNorm layers frozen (in place)."""
    from timm.utils.model import freeze_batch_norm_2d

    head = head_of(net, "model.freeze_backbone=true")
    trainable = {id(p) for p in head.parameters()}
    for p in net.parameters():
        p.requires_grad_(id(p) in trainable)

    def convert(module: nn.Module) -> None:
        for name, child in module.named_children():
            if child is head:
                continue
            if any(m is head for m in child.modules()):
                convert(child)
            else:
                module.add_module(name, freeze_batch_norm_2d(child))

    convert(net)


def groups(net: nn.Module, weight_decay: float, backbone_lr_mult: float = 1.0, norm_lr_mult: float = 1.0) -> list[dict]:
    """Decay and no-decay groups of the trainable parameters (biases and norm parameters get no weight decay, and
    `norm_lr_mult` times the lr: airbench94 trains them at 64x), split into backbone and head when the backbone's
    learning rate differs; empty groups left out."""
    trainable = [p for p in net.parameters() if p.requires_grad]
    parts = [(trainable, 1.0)]
    if backbone_lr_mult != 1:
        head = {id(p) for p in head_of(net, "model.backbone_lr_mult").parameters()}
        parts = [
            ([p for p in trainable if id(p) not in head], float(backbone_lr_mult)),
            ([p for p in trainable if id(p) in head], 1.0),
        ]
    found = []
    for params, mult in parts:
        for decay, keep, own in ((weight_decay, lambda p: p.ndim > 1, 1.0), (0.0, lambda p: p.ndim <= 1, norm_lr_mult)):
            group = {"params": [p for p in params if keep(p)], "weight_decay": decay}
            if mult * own != 1:
                group["lr_mult"] = mult * own
            found.append(group)
    # Only a split run leaves empty groups out: an unsplit one keeps its two, as its checkpoints have.
    return found if backbone_lr_mult == 1 else [g for g in found if g["params"]]


def scale_lrs(optimizer: Optimizer) -> None:
    """Each group's lr times its `lr_mult`: call it after building the optimizer, before its scheduler (which
    scales OneCycle's max_lr by the same, brisk.optim.schedules.build)."""
    for group in optimizer.param_groups:
        group["lr"] *= group.get("lr_mult", 1.0)
