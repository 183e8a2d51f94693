from brisk.data.datamodule import CIFAR10DataModule

__all__ = ["CIFAR10DataModule"]
