"""What the LightningModule takes from its DataModule when fit starts: images for a net that initialises from the
data (AirbenchNet's whitening), and the examples per optimizer step for an optimizer stated per example
(brisk.optim.PerExamplesSGD)."""

from __future__ import annotations

import time

import lightning as L
import torch
from torch import nn

from brisk.errors import BriskError


def init_net(net: nn.Module, datamodule: L.LightningDataModule, device: torch.device, count: int = 5000) -> float:
    """Give `net.init_from_data` the first `count` training images, normalized, on `device` (airbench94 whitens
    from 5000). Returns the seconds it took: the speedrun's clock counts them, as airbench's does."""
    if not hasattr(datamodule, "tensors"):
        raise BriskError(
            "model.net.whiten_init=true whitens from the train split of a brisk DataModule: fit with one, or set "
            "model.net.whiten_init=false."
        )
    start = time.perf_counter()
    images = datamodule.tensors("train")[0][:count].to(device)
    net.init_from_data(datamodule.prepare_batch(images, train=False).float())
    return time.perf_counter() - start


def examples_per_step(trainer: L.Trainer, optimizer: dict) -> int:
    """Training examples per optimizer step, over all ranks: the global batch times the accumulation."""
    batch = (getattr(trainer.datamodule, "hparams", None) or {}).get("batch_size")
    if batch is None:
        raise BriskError(
            f"optimizer.type={optimizer['type']} sets its lr per example from data.batch_size: fit with a brisk "
            "DataModule, or use optimizer=sgd."
        )
    return int(batch) * trainer.accumulate_grad_batches
