"""Function calls per training step of a minimal Lightning fit, with automatic and with manual optimization.

What manual optimization would save of Lightning's own loop (docs/measurements.md, "Cost per step, by component"):
    OMP_NUM_THREADS=1 python -m brisk_lab.optimization_calls
A count, not a clock: it reads the same on every run (brisk_lab.clock.CallCount).
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from brisk_lab.clock import StepClock


class Automatic(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 10)

    def training_step(self, batch, batch_idx: int):
        x, y = batch
        return F.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Manual(Automatic):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx: int):
        loss = super().training_step(batch, batch_idx)
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


def calls_per_step(module: L.LightningModule) -> float:
    clock = StepClock(warmup=10, steps=50, count_calls=True)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[clock],
    )
    data = TensorDataset(torch.randn(3200, 3), torch.randint(0, 10, (3200,)))
    trainer.fit(module, DataLoader(data, batch_size=32))
    return clock.result["calls_per_step"]


if __name__ == "__main__":
    for module in (Automatic(), Manual()):
        print(f"{type(module).__name__}: {calls_per_step(module):.0f} calls per step")
