"""A loader that yields whole batches from in-memory uint8 tensors by indexing.

There is no per-sample __getitem__ and no collate: one index_select per batch. Under DDP it
shards each epoch itself, so it needs no DistributedSampler: every rank draws the same
permutation (seeded by the run seed and the epoch) and takes a disjoint strided slice of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch


class TensorBatchLoader:
    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epoch_fn: Callable[[], int] = lambda: 0,
    ) -> None:
        self.images, self.labels = images, labels
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.rank, self.world_size, self.seed, self.epoch_fn = rank, world_size, seed, epoch_fn

    def _shard_size(self) -> int:
        n = len(self.labels)
        # Training drops the ragged tail so every rank steps the same number of times; evaluation
        # keeps every sample exactly once, so ranks may differ by one sample (and metrics stay exact).
        if self.drop_last:
            return n // self.world_size
        return len(range(self.rank, n, self.world_size))

    def __len__(self) -> int:
        size = self._shard_size()
        return size // self.batch_size if self.drop_last else -(-size // self.batch_size)

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's sample order for `epoch`."""
        n = len(self.labels)
        if self.shuffle:
            g = torch.Generator().manual_seed((self.seed + 1_000_003 * epoch) % 2**63)
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        if self.drop_last:
            order = order[: (n // self.world_size) * self.world_size]
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self.indices(self.epoch_fn())
        for i in range(len(self)):
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.images.index_select(0, idx), self.labels.index_select(0, idx)
