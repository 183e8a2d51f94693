"""A loader that yields whole batches from in-memory uint8 tensors by indexing.

There is no per-sample __getitem__ and no collate: one index_select per batch. Under DDP it
shards each epoch itself, so it needs no DistributedSampler: every rank draws the same
permutation (seeded by the run seed and the epoch) and takes a disjoint strided slice of it.

`rows` maps the split's samples to rows of `images`, so a split taken out of a larger (possibly
memory-mapped) tensor is never copied.

It is stateful: Lightning saves `state_dict()` (how far into which epoch) in every checkpoint and,
when it resumes mid-epoch, calls `load_state_dict()` before iterating, so the resumed epoch yields
exactly the batches the interrupted one had not reached yet.

With `balanced`, each epoch's order is a draw with replacement instead of a permutation: every position picks
a class uniformly, then an image of that class uniformly, so an image is drawn with probability inversely
proportional to its class's frequency, and an epoch keeps its length. The draw is seeded like the permutation,
so the ranks' shards and a resumed epoch stay exact.

The tensors may live on the training device (`data.resident`): the order is still drawn on the CPU, from the
same seed, and moved to the device once per epoch, so a resident run trains on exactly the batches a host one
does, and each batch is one index_select on the device with no copy from the host.

With `flip_phase` (one bool per sample), each batch comes with a third tensor, the images to mirror: the
sample's phase in even epochs, its opposite in odd ones. That is airbench's alternating flip (every image is
seen both ways in any two epochs running; its authors measured about 10% fewer steps to the same accuracy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from brisk.utils.threads import small_ops


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
        rows: torch.Tensor | None = None,
        balanced: bool = False,
        flip_phase: torch.Tensor | None = None,
    ) -> None:
        self.images, self.labels, self.rows = images, labels, rows
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.rank, self.world_size, self.seed, self.epoch_fn = rank, world_size, seed, epoch_fn
        # Position in the current epoch's order. Lightning reads the batch count straight after a batch
        # is trained on (it does not prefetch loaders that have a length), so it counts consumed batches.
        self._epoch, self._yielded = 0, 0
        self._resume_at: tuple[int, int] | None = None
        self.balanced, self.flip_phase = balanced, flip_phase
        if balanced:  # the samples grouped by class, and where each present class's group starts and how long it is
            cpu_labels = labels.cpu()  # the order is drawn on the host, wherever the data lives
            self._by_class = torch.argsort(cpu_labels, stable=True)
            counts = torch.bincount(cpu_labels)
            self._counts = counts[counts > 0]
            self._starts = (torch.cumsum(counts, 0) - counts)[counts > 0]

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
        """This rank's sample order for `epoch`, on the CPU."""
        n = len(self.labels)
        g = torch.Generator().manual_seed((self.seed + 1_000_003 * epoch) % 2**63)
        if self.balanced:
            cls = torch.randint(len(self._counts), (n,), generator=g)
            member = (torch.rand(n, generator=g, dtype=torch.float64) * self._counts[cls]).long()
            order = self._by_class[self._starts[cls] + member]
        elif self.shuffle:
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        if self.drop_last:
            order = order[: (n // self.world_size) * self.world_size]
        return order[self.rank :: self.world_size]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self._epoch, "batches": self._yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next iteration start where the saved one stopped (if it is the same epoch)."""
        self._resume_at = (int(state["epoch"]), int(state["batches"]))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        # A generator: the epoch is read at the first batch, not at iter(). On resume Lightning calls
        # iter() before it has moved its epoch counter past a checkpoint taken at the end of an epoch.
        epoch, start = self.epoch_fn(), 0
        if self._resume_at is not None:
            if self._resume_at[0] == epoch:
                start = self._resume_at[1]
            self._resume_at = None
        self._epoch, self._yielded = epoch, start
        order = self.indices(epoch).to(self.labels.device)  # one copy an epoch for resident data, else none
        rows = order if self.rows is None else self.rows.index_select(0, order)
        flips = None if self.flip_phase is None else self.flip_phase.index_select(0, order) ^ bool(epoch % 2)
        for i in range(start, len(self)):
            batch = slice(i * self.batch_size, (i + 1) * self.batch_size)
            self._yielded = i + 1
            with small_ops(self.images.device):  # the gather too: brisk.utils.threads
                x, y = self.images.index_select(0, rows[batch]), self.labels.index_select(0, order[batch])
            yield (x, y) if flips is None else (x, y, flips[batch])
