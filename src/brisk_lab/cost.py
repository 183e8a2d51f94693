"""What a net costs before it runs: parameters and forward FLOPs per image."""

from __future__ import annotations

import torch
from omegaconf import DictConfig
from torch.utils.flop_counter import FlopCounterMode

from brisk import NETS


def net_cost(net_cfg: DictConfig, num_classes: int, image_size: int) -> dict[str, float]:
    """Counted on a fresh net from the config, so a compiled or moved net is never disturbed.

    FlopCounterMode counts a multiply-add as 2 FLOPs; a training step costs about 3x the forward.
    """
    net = NETS.build(net_cfg, num_classes=num_classes).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        net(torch.zeros(1, 3, image_size, image_size))
    return {
        "params": sum(p.numel() for p in net.parameters()),
        "gflops_per_image": counter.get_total_flops() / 1e9,
    }
