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


# -- data.balanced: a class-balanced draw with replacement

IMBALANCED = torch.cat([torch.full((n,), c) for c, n in enumerate((900, 90, 10))])  # 1000 labels, classes 90:9:1


def _balanced(batch, rank=0, world=1, epoch=0):
    n = len(IMBALANCED)
    images = torch.zeros(n, 3, 2, 2, dtype=torch.uint8)
    return TensorBatchLoader(
        images, IMBALANCED, batch, True, True, rank, world, seed=7, epoch_fn=lambda: epoch, balanced=True
    )


def test_a_balanced_epoch_draws_the_classes_evenly_and_keeps_its_length():
    loader = _balanced(100)
    drawn = loader.indices(0)
    assert len(drawn) == 1000 and len(loader) == 10
    counts = torch.bincount(IMBALANCED[drawn], minlength=3)
    assert counts.sum() == 1000 and all(280 <= c <= 390 for c in counts.tolist()), counts  # 333 each, sd ~15
    assert len(set(drawn[IMBALANCED[drawn] == 0].tolist())) > 200  # class 0's images drawn from all of its 900
    assert torch.equal(torch.cat([y for _, y in loader]), IMBALANCED[drawn])
    assert not torch.equal(drawn, _balanced(100, epoch=1).indices(1))


def test_balanced_shards_are_disjoint_slices_of_one_draw():
    whole = _balanced(10).indices(3)
    shards = [_balanced(10, rank=r, world=4, epoch=3).indices(3) for r in range(4)]
    assert all(len(s) == 250 for s in shards)
    # position i of the epoch's draw goes to rank i % 4: every position once, on one rank
    assert torch.equal(torch.stack(shards, 1).reshape(-1), whole)


def test_a_balanced_epoch_resumes_with_the_batches_it_had_left():
    uninterrupted = [y for _, y in _balanced(50, rank=1, world=2, epoch=2)]
    first = _balanced(50, rank=1, world=2, epoch=2)
    batches = iter(first)
    for _ in range(3):
        next(batches)
    resumed = _balanced(50, rank=1, world=2, epoch=2)
    resumed.load_state_dict(first.state_dict())
    rest = [y for _, y in resumed]
    assert len(rest) == len(uninterrupted) - 3 == 7
    assert all(torch.equal(a, b) for a, b in zip(rest, uninterrupted[3:], strict=True))
