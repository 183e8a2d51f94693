"""Every use of a private Lightning or Hydra API, one small function each, with the version it was checked on."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import StochasticWeightAveraging, WeightAveraging
from torch import nn


def averaged_module(callback: L.Callback) -> nn.Module | None:
    """The model copy a weight-averaging callback keeps, or None for other callbacks (or before fit's setup).

    Checked on lightning 2.6.6: WeightAveraging (EMA) keeps an AveragedModel in `_average_model` (the copy is its
    `.module`); StochasticWeightAveraging keeps a deep copy of the LightningModule in `_average_model`. Neither
    exposes it publicly, and brisk's pruning must give the copy the same masks (see brisk.callbacks.pruning).
    """
    if isinstance(callback, WeightAveraging):
        average = callback._average_model
        return None if average is None else average.module
    if isinstance(callback, StochasticWeightAveraging):
        return callback._average_model
    return None
