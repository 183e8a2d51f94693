"""data.resident and augment.flip=alternate: the splits copied to the device once give the
same batches as without; each image once an epoch, disjoint shards, an exact mid-epoch resume; each image mirrored
in every other epoch; the augmented images are translations and mirrors of their originals."""

from __future__ import annotations

import logging

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from brisk.data import augment as aug
from brisk.data import resident
from brisk.data.loader import TensorBatchLoader
from brisk.models.build import build_datamodule
from brisk.run.prepare import build
from helpers import TINY, compose_cfg

N = 200


def _loader(epoch=0, rank=0, world=1, phase=None):
    images = torch.arange(N).view(N, 1, 1, 1).expand(N, 3, 4, 4).to(torch.uint8)  # image i holds value i
    phase = torch.rand(N, generator=torch.Generator().manual_seed(1)) < 0.5 if phase is None else phase
    return TensorBatchLoader(
        images, torch.arange(N), 16, True, True, rank, world, seed=5, epoch_fn=lambda: epoch, flip_phase=phase
    )


def test_resident_batches_are_those_of_the_host_loader(brisk_root, caplog):
    modules = []
    for on_device in (False, True):
        cfg = compose_cfg([*TINY, "data.augment.flip=alternate", f"data.resident={on_device}"], brisk_root)
        datamodule = build_datamodule(cfg)
        datamodule.prepare_data()
        datamodule.setup("fit")
        modules.append(datamodule)
    host, resident = modules
    with caplog.at_level(logging.INFO, logger="brisk"):
        assert resident.placed("train")[1] is None  # a compact copy: the split's own images, no row table
        for split in ("train", "val"):
            loaders = [getattr(m, f"{split}_dataloader")() for m in (host, resident)]
            pairs = list(zip(*loaders, strict=True))
            assert len(pairs) == len(loaders[0]) > 0
            for a, b in pairs:
                assert len(a) == len(b) == (3 if split == "train" else 2)  # train batches carry their flips
                assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    # Where each split lives and its size, said once though the train split was asked for twice; the host run
    # says nothing of the kind.
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data.resident:")]
    sizes = {s: len(host.splits[s].rows) * 3 * 32 * 32 / 2**20 for s in ("train", "val")}
    assert said == [
        f"data.resident: the {s} split ({len(host.splits[s].rows)} images, {sizes[s]:.1f} MiB) is on cpu"
        for s in ("train", "val")
    ]


def test_each_image_once_an_epoch_in_disjoint_shards_with_its_flip():
    for epoch in (0, 1):
        seen = {}
        for rank in range(2):
            for x, y, flips in _loader(epoch, rank, 2):
                assert torch.equal(x[:, 0, 0, 0].long(), y)  # the image is its label's
                for i, f in zip(y.tolist(), flips.tolist(), strict=True):
                    assert i not in seen
                    seen[i] = f
        assert len(seen) == 2 * (N // 2 // 16) * 16  # each rank's whole batches of its half
        if epoch == 0:
            first = seen
        else:  # alternating: every image seen in both epochs is mirrored in exactly one of them
            both = first.keys() & seen.keys()
            assert len(both) > N // 2 and all(first[i] != seen[i] for i in both)


def test_a_resumed_epoch_yields_the_batches_it_had_left():
    whole = list(_loader(epoch=3))
    first = _loader(epoch=3)
    it = iter(first)
    for _ in range(4):
        next(it)
    resumed = _loader(epoch=3)
    resumed.load_state_dict(first.state_dict())
    rest = list(resumed)
    assert len(rest) == len(whole) - 4
    for a, b in zip(rest, whole[4:], strict=True):
        assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


def test_given_flips_mirror_exactly_those_images_in_a_translation():
    torch.manual_seed(0)
    x = torch.randint(1, 256, (48, 3, 32, 32), dtype=torch.uint8)  # no zero pixel: the padding is known
    flips = torch.rand(48) < 0.5
    for pad in (0, 2):
        y = aug.augment(x, crop_pad=pad, flip=flips)
        padded = F.pad(x, (pad,) * 4)
        for i in range(len(x)):
            source = padded[i].flip(2) if flips[i] else padded[i]
            windows = [
                (dy, dx)
                for dy in range(2 * pad + 1)
                for dx in range(2 * pad + 1)
                if torch.equal(source[:, dy : dy + 32, dx : dx + 32], y[i])
            ]
            assert windows, f"image {i} (flip {bool(flips[i])}) is not a window of its padded original"
            # the pixel multiset is the original's, less those shifted out (all of it without padding)
            kept, whole = (torch.bincount(v[v != 0].flatten(), minlength=256) for v in (y[i], x[i]))
            assert (kept <= whole).all() and (pad > 0 or torch.equal(kept, whole))


def test_cutout_only_zeroes_one_square_of_a_translated_mirror():
    torch.manual_seed(1)
    x = torch.randint(1, 256, (32, 3, 32, 32), dtype=torch.uint8)
    flips = torch.rand(32) < 0.5
    y = aug.augment(x, crop_pad=2, flip=flips, cutout_size=8)
    for i in range(len(x)):
        holes = (y[i] == 0).all(0)  # the cutout zeroes all channels; the padding too, at the border
        inner = holes[2:-2, 2:-2]
        assert inner.sum() <= 8 * 8
        kept, whole = (torch.bincount(v[v != 0].flatten(), minlength=256) for v in (y[i], x[i]))
        assert (kept <= whole).all() and kept.sum() >= whole.sum() - 3 * (8 * 8 + 2 * 32 * 2 * 2)


def test_a_split_that_does_not_fit_stays_on_the_host_and_says_so(brisk_root, monkeypatch, caplog):
    cfg = compose_cfg([*TINY, "data.resident=true"], brisk_root)
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    monkeypatch.setattr(resident, "SHARE", 1e-9)  # no split fits in a billionth of the free memory
    with caplog.at_level(logging.WARNING, logger="brisk"):
        images, rows, labels = datamodule.placed("train")
    assert rows is not None and images is datamodule.splits["train"].images  # the host's tensors, unchanged
    assert "data.resident: the train split" in caplog.text and "stays on the host" in caplog.text
    assert len(list(datamodule.train_dataloader())) == len(datamodule.train_dataloader()) > 0


@pytest.mark.parametrize("flip", ["true", "alternate"])
def test_resident_and_host_runs_train_to_the_same_loss(brisk_root, flip):
    """The same seed, the same batches: on a CPU the losses agree exactly (docs/data.md states 0 tolerance)."""
    losses = []
    for on_device in (False, True):
        cfg = compose_cfg(
            [
                *TINY,
                "trainer.max_epochs=2",
                "callbacks=fast",
                "trainer.num_sanity_val_steps=0",
                "trainer.limit_train_batches=6",
                "trainer.limit_val_batches=2",
                "trainer.deterministic=true",
                f"data.augment.flip={flip}",
                f"data.resident={on_device}",
            ],
            brisk_root,
        )
        L.seed_everything(cfg.seed)
        trainer, datamodule, model = build(cfg)
        trainer.fit(model, datamodule=datamodule)
        assert (datamodule.placed("train")[1] is None) == on_device
        losses.append((trainer.callback_metrics["train/loss"].item(), trainer.callback_metrics["val/loss"].item()))
    assert losses[0] == losses[1]
