"""brisk: a fast PyTorch Lightning + Hydra template for CIFAR-10."""

import time

__version__ = "0.1.0"
# Where /proc is missing, the startup clock (brisk.callbacks.startup) starts from here.
IMPORTED_AT = time.time()
