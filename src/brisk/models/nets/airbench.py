"""The ~2M-parameter net of airbench94 (Keller Jordan, 2024), the fastest published CIFAR-10 trainer.

Layout as described there: a 2x2 patch conv, then three groups of (conv, max-pool, BN, GELU,
conv, BN, GELU) at widths 64/256/256, a 3x3 max-pool and a bias-free linear head whose output
is scaled down. airbench94 reaches 94% in 2.59 s on an A100 with its whole recipe (whitening
init, lookahead, TTA, Muon); brisk reproduces the net, not that recipe.
"""

from __future__ import annotations

import torch
from torch import nn


class _BatchNorm(nn.BatchNorm2d):
    # airbench uses a small momentum-like smoothing (0.6 in its convention = 0.4 here) and a
    # fixed scale: only the shift is learned.
    def __init__(self, c: int) -> None:
        super().__init__(c, eps=1e-12, momentum=0.4)
        self.weight.requires_grad_(False)


class _ConvGroup(nn.Sequential):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding="same", bias=False),
            nn.MaxPool2d(2),
            _BatchNorm(c_out),
            nn.GELU(),
            nn.Conv2d(c_out, c_out, 3, padding="same", bias=False),
            _BatchNorm(c_out),
            nn.GELU(),
        )


class AirbenchNet(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        widths: tuple[int, int, int] = (64, 256, 256),
        scale: float = 1 / 9,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.whiten = nn.Conv2d(3, 24, kernel_size=2, padding=0, bias=True)
        self.body = nn.Sequential(
            nn.GELU(),
            _ConvGroup(24, widths[0]),
            _ConvGroup(widths[0], widths[1]),
            _ConvGroup(widths[1], widths[2]),
            nn.MaxPool2d(3),
            nn.Flatten(),
            nn.Dropout(dropout),  # of the features entering the head
        )
        self.head = nn.Linear(widths[2], num_classes, bias=False)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.whiten(x))) * self.scale
