"""SpeedMeter: training images/s, without a host sync per step.

Lightning's ThroughputMonitor calls torch.cuda.synchronize() after every batch; this measures
whole epochs instead (one sync at each end) and leaves validation time out.
"""

from __future__ import annotations

import time

import lightning as L
import torch


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so that a host clock reading includes it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class SpeedMeter(L.Callback):
    def __init__(self) -> None:
        self.images = 0  # global, all ranks
        self.seconds = 0.0
        self._t0: float | None = None
        self._epoch_images = 0

    def _start(self, trainer: L.Trainer) -> None:
        sync(trainer.strategy.root_device)
        self._t0 = time.perf_counter()

    def _stop(self, trainer: L.Trainer) -> None:
        if self._t0 is not None:
            sync(trainer.strategy.root_device)
            self.seconds += time.perf_counter() - self._t0
            self._t0 = None

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._epoch_images = 0
        self._start(trainer)

    # A run resumed mid-epoch gets no on_train_epoch_start for that epoch: start counting here as well.
    def on_train_start(self, trainer, pl_module) -> None:
        self.on_train_epoch_start(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._epoch_images += len(batch[1])

    # Validation inside fit runs before on_train_epoch_end: pause the clock for it.
    def on_validation_start(self, trainer, pl_module) -> None:
        self._stop(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._start(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._stop(trainer)
        self.images += self._epoch_images * trainer.world_size
        if self.seconds > 0:
            pl_module.log("train/images_per_sec", self.images / self.seconds, rank_zero_only=True)

    def elapsed(self) -> float:
        """Training seconds so far, with the epoch now running (no sync: for a checkpoint written mid-epoch)."""
        return self.seconds + (time.perf_counter() - self._t0 if self._t0 is not None else 0.0)

    @property
    def images_per_sec(self) -> float:
        return self.images / self.seconds if self.seconds else 0.0
