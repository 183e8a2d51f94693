"""torchvision's ResNet-18 with the CIFAR stem: a 3x3 stride-1 first conv and no max-pool.

On 32x32 inputs the ImageNet stem (7x7 stride 2 + max-pool) throws away 15/16 of the pixels
before the first block (He et al. 2016 use a 3x3 stem for CIFAR).
"""

from __future__ import annotations

from torch import nn
from torchvision.models import resnet18

from brisk.registry import NETS


@NETS.register("resnet18")
def cifar_resnet18(num_classes: int = 10, dropout: float = 0.0) -> nn.Module:
    net = resnet18(weights=None, num_classes=num_classes)
    net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    # Dropout of the pooled features entering fc; beside the pool, so the state_dict keys stay torchvision's.
    net.avgpool = nn.Sequential(net.avgpool, nn.Dropout(dropout))
    return net
