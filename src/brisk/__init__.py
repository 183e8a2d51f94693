"""brisk: a fast PyTorch Lightning + Hydra template for CIFAR-10."""

__version__ = "0.1.0"
