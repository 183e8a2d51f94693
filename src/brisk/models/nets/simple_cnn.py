"""A small CNN: the single conv layer of the classic DDP example grown into three conv blocks."""

from __future__ import annotations

from torch import nn

from brisk.errors import check
from brisk.registry import NETS


def _block(c_in: int, c_out: int, norm: bool, pool: bool) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=not norm)]
    if norm:
        layers.append(nn.BatchNorm2d(c_out))
    layers.append(nn.ReLU(inplace=True))
    if pool:
        layers.append(nn.MaxPool2d(2))
    return layers


@NETS.register("simple_cnn")
class SimpleCNN(nn.Sequential):
    """Three conv blocks (w, 2w, 4w channels), each halving the resolution, then average and linear.

    Pooling from the first block keeps it cheap: ~10 MMAC per image at width 32.

    `norm=False` gives a BatchNorm-free net, whose per-sample independence lets tests compare
    DDP and accumulation against a single big batch exactly. `dropout` is the drop probability of the
    features entering the linear head (0: none).
    """

    def __init__(self, num_classes: int = 10, width: int = 32, norm: bool = True, dropout: float = 0.0) -> None:
        check("model.net.width", width, lambda v: v >= 1, "a whole number >= 1", int)
        super().__init__(
            *_block(3, width, norm, pool=True),
            *_block(width, 2 * width, norm, pool=True),
            *_block(2 * width, 4 * width, norm, pool=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(4 * width, num_classes),
        )
