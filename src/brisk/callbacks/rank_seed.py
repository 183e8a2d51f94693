"""RankSeed: each DDP rank its own stream of random numbers for training.

Every rank is seeded alike (`seed_everything(cfg.seed)`), so without this the ranks would draw the
same crops and flips for their different images. The sample order does not use this stream: the
DataModule seeds it from the run seed, the same on all ranks, so their shards stay disjoint.
A resumed run then restores each rank's saved generators (ResumeState).
"""

from __future__ import annotations

import lightning as L
import torch


class RankSeed(L.Callback):
    def __init__(self) -> None:
        self.seed = torch.initial_seed()  # the run's seed: brisk-train seeds before it builds

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.world_size > 1:
            torch.manual_seed(self.seed + trainer.global_rank)
