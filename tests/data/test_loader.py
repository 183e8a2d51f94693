"""The batch loader: whole batches by indexing; under DDP disjoint shards that cover the split."""

from __future__ import annotations

import torch

from brisk.data.loader import TensorBatchLoader


def _loader(n, batch, rank=0, world=1, shuffle=True, drop_last=True, epoch=0):
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 32, 32) if n <= 256 else None
    labels = torch.arange(n)
    return TensorBatchLoader(
        images if images is not None else torch.zeros(n, 3, 32, 32, dtype=torch.uint8),
        labels,
        batch,
        shuffle=shuffle,
        drop_last=drop_last,
        rank=rank,
        world_size=world,
        seed=7,
        epoch_fn=lambda: epoch,
    )


def _seen(loader):
    return torch.cat([y for _, y in loader]).tolist()


def test_batches_are_whole_and_aligned():
    loader = _loader(100, 16)
    batches = list(loader)
    assert len(batches) == len(loader) == 6
    for x, y in batches:
        assert x.shape == (16, 3, 32, 32) and x.dtype == torch.uint8
        assert torch.equal(x[:, 0, 0, 0].long(), y)  # image i carries value i


def test_shards_are_disjoint_and_cover_the_split():
    for epoch in range(2):
        shards = [_seen(_loader(1000, 10, rank=r, world=4, epoch=epoch)) for r in range(4)]
        assert all(len(s) == 250 for s in shards)
        flat = [i for s in shards for i in s]
        assert len(set(flat)) == 1000


def test_eval_keeps_every_sample_once():
    shards = [_seen(_loader(1003, 100, rank=r, world=2, shuffle=False, drop_last=False)) for r in range(2)]
    assert sorted(shards[0] + shards[1]) == list(range(1003))


def test_order_depends_on_epoch_not_on_call():
    assert _seen(_loader(500, 50, epoch=1)) == _seen(_loader(500, 50, epoch=1))
    assert _seen(_loader(500, 50, epoch=1)) != _seen(_loader(500, 50, epoch=2))
