"""The ~2M-parameter net of airbench94 (Keller Jordan, 2024), the fastest published CIFAR-10 trainer.

Layout as described there: a 2x2 patch conv, then three groups of (conv, max-pool, BN, GELU,
conv, BN, GELU) at widths 64/256/256, a 3x3 max-pool and a bias-free linear head whose output
is scaled down. airbench94 reaches 94% in 3.83 s on an A100 with its whole recipe; the parts of
that recipe which belong to the net are options here, off by default (experiment=speedrun turns them on):

- `whiten_init`: the first conv is frozen at a whitening of 2x2 patches, computed from training images
  (`init_from_data`, which ImageClassifier calls when fit starts). Its bias still trains.
- `dirac`: each 3x3 conv starts as the identity on its first c_in output channels (torch's dirac_).
- `frozen_bn_scale`: BatchNorm learns only its shift (airbench's choice, and brisk's default for this net).
"""

from __future__ import annotations

import torch
from torch import nn

from brisk.errors import BriskError, check_flag
from brisk.registry import NETS


class _BatchNorm(nn.BatchNorm2d):
    # airbench uses a small momentum-like smoothing (0.6 in its convention = 0.4 here) and a
    # fixed scale: only the shift is learned.
    def __init__(self, c: int, frozen_scale: bool = True) -> None:
        super().__init__(c, eps=1e-12, momentum=0.4)
        self.weight.requires_grad_(not frozen_scale)


class _ConvGroup(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, frozen_bn_scale: bool) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding="same", bias=False),
            nn.MaxPool2d(2),
            _BatchNorm(c_out, frozen_bn_scale),
            nn.GELU(),
            nn.Conv2d(c_out, c_out, 3, padding="same", bias=False),
            _BatchNorm(c_out, frozen_bn_scale),
            nn.GELU(),
        )


def patch_moments(images: torch.Tensor, k: int, chunk: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and covariance (float64) of every k x k window of `images` (n x c x h x w), flattened to c k k: the
    patches the first conv sees. In chunks: 5000 CIFAR images have 4.8M patches, 460 MB at once in float64."""
    total, outer, count = 0, 0, 0
    for part in images.split(chunk):
        patches = part.double().unfold(2, k, 1).unfold(3, k, 1)  # n x c x h' x w' x k x k
        flat = patches.permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(0, 2)
        total, outer, count = total + flat.sum(0), outer + flat.T @ flat, count + len(flat)
    mean = total / count
    return mean, outer / count - torch.outer(mean, mean)


def whitening(mean: torch.Tensor, covariance: torch.Tensor, eps: float = 5e-4) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight rows, bias) of a conv whose output on patches of this mean and covariance has identity covariance and
    zero mean: the eigenvectors scaled by 1 / sqrt(eigenvalue + eps), the strongest first, each also negated (2 c k k
    filters, as airbench has: with the GELU that follows, both signs of each direction pass). `eps` keeps the
    directions of near-zero variance from being blown up (airbench's 5e-4)."""
    values, vectors = torch.linalg.eigh(covariance)  # ascending
    weight = (vectors / (values + eps).sqrt()).T.flip(0)
    weight = torch.cat([weight, -weight])
    return weight.float(), -(weight @ mean).float()


@NETS.register("airbench")
class AirbenchNet(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        widths: tuple[int, int, int] = (64, 256, 256),
        scale: float = 1 / 9,
        dropout: float = 0.0,
        whiten_init: bool = False,
        dirac: bool = False,
        frozen_bn_scale: bool = True,
    ):
        # torch builds a conv of width 0 and fails only at the first forward pass, in a traceback. One line for the
        # list (check() takes one number), in check()'s words.
        given = list(widths) if isinstance(widths, list | tuple) else [widths]
        if len(given) != 3 or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in given):
            shown = given if isinstance(widths, list | tuple) else repr(widths)
            raise BriskError(
                f"model.net.widths={shown} must be three whole numbers >= 1, e.g. [64,256,256].",
                "model.net.widths",
            )
        for name, flag in (("whiten_init", whiten_init), ("dirac", dirac), ("frozen_bn_scale", frozen_bn_scale)):
            check_flag(f"model.net.{name}", flag)
        super().__init__()
        self.whiten = nn.Conv2d(3, 24, kernel_size=2, padding=0, bias=True)
        self.body = nn.Sequential(
            nn.GELU(),
            _ConvGroup(24, widths[0], frozen_bn_scale),
            _ConvGroup(widths[0], widths[1], frozen_bn_scale),
            _ConvGroup(widths[1], widths[2], frozen_bn_scale),
            nn.MaxPool2d(3),
            nn.Flatten(),
            nn.Dropout(dropout),  # of the features entering the head
        )
        self.head = nn.Linear(widths[2], num_classes, bias=False)
        self.scale = scale
        self.whiten_init = whiten_init
        if whiten_init:
            self.whiten.weight.requires_grad_(False)
        if dirac:
            for conv in (m for m in self.body.modules() if isinstance(m, nn.Conv2d)):
                nn.init.dirac_(conv.weight.data[: conv.in_channels])

    @torch.no_grad()
    def init_from_data(self, images: torch.Tensor) -> None:
        """Set the whitening conv from normalized training images (n x 3 x h x w), if `whiten_init`."""
        if not self.whiten_init:
            return
        weight, bias = whitening(*patch_moments(images, self.whiten.kernel_size[0]))
        self.whiten.weight.copy_(weight.view_as(self.whiten.weight))
        self.whiten.bias.copy_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.whiten(x))) * self.scale
