"""Mixup and cutmix (augment=mixup|cutmix): whole batches mixed on their device, after normalization, with
soft targets that sum to 1 and hold each image's mix; a tiny run trains with them; bad alphas are refused."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

from brisk.data import mixing
from brisk.errors import BriskError
from brisk.models.losses import inverse_frequency
from brisk.run import checks
from brisk.run.prepare import build
from helpers import TINY, compose_cfg

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _batch(n=16, classes=10):
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(n, 3, 32, 32, generator=g) - 0.45) / 0.25  # a normalized float batch, negative values too
    return x.to(DEVICE), torch.randint(classes, (n,), generator=g).to(DEVICE)


def _shares(target, y):
    """Each row's mass on its own label and on its neighbour's (the batch rolled by one)."""
    own = target.gather(1, y[:, None])[:, 0]
    other = target.gather(1, y.roll(1, 0)[:, None])[:, 0]
    return own, other


def test_mixup_blends_each_image_with_its_neighbour_and_the_labels_alike():
    torch.manual_seed(0)
    x, y = _batch()
    y = torch.arange(16, device=DEVICE) % 10  # neighbours differ, so each row has two labels
    mixed, target = mixing.mixer(10, mixup_alpha=1.0)(x, y)
    assert mixed.device == x.device and target.shape == (16, 10) and target.dtype == torch.float32
    assert torch.allclose(target.sum(1), torch.ones(16, device=DEVICE))
    own, other = _shares(target, y)
    lam = float(own[0])  # one lambda per batch, as in the paper
    assert 0 < lam < 1 and torch.allclose(own, torch.full_like(own, lam)) and torch.allclose(own + other, own * 0 + 1)
    assert torch.allclose(mixed, lam * x + (1 - lam) * x.roll(1, 0), atol=1e-5)


def test_cutmix_pastes_a_box_and_mixes_the_labels_by_its_area():
    torch.manual_seed(3)
    x, y = _batch()
    y = torch.arange(16, device=DEVICE) % 10
    mixed, target = mixing.mixer(10, cutmix_alpha=1.0)(x, y)
    assert torch.allclose(target.sum(1), torch.ones(16, device=DEVICE))
    pasted = (mixed != x).any(1)  # pixels that came from the neighbour (random floats: never equal by chance)
    assert torch.equal(pasted, (mixed == x.roll(1, 0)).all(1) & pasted)
    own, _ = _shares(target, y)
    kept = 1 - pasted[0].float().mean()
    assert 0 < float(kept) < 1 and torch.allclose(own, torch.full_like(own, float(kept)))


def test_both_at_once_give_one_of_the_two_per_batch():
    torch.manual_seed(0)
    mix = mixing.mixer(10, mixup_alpha=1.0, cutmix_alpha=1.0)
    x, y = _batch()
    kinds = set()
    for _ in range(12):
        mixed, target = mix(x, y)
        assert torch.allclose(target.sum(1), torch.ones(16, device=DEVICE))
        kinds.add("cutmix" if bool(((mixed == x).all(1)).any()) else "mixup")
    assert kinds == {"mixup", "cutmix"}
    assert mixing.mixer(10) is None


def test_an_alpha_that_is_not_positive_is_refused(brisk_root):
    cfg = compose_cfg([*TINY, "augment=[mixup,cutmix]"], brisk_root)
    checks.validate(cfg)
    for key, bad in (("mixup_alpha", 0), ("cutmix_alpha", -1.0)):
        cfg.data.augment[key] = bad
        with pytest.raises(BriskError, match=f"data.augment.{key}={bad} must be a number > 0 \\(or null\\)"):
            checks.validate(cfg)
        cfg.data.augment[key] = None  # null: off
        checks.validate(cfg)


def test_a_tiny_run_trains_on_mixed_batches_with_auto_weights_and_a_balanced_draw(project):
    """augment=mixup with class weights, label smoothing and data.balanced: the training step gets soft targets
    (validation the plain labels), and the run ends with finite losses."""
    args = ["trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=1", "callbacks=none"]
    more = ["augment=mixup", "model.class_weights=auto", "model.label_smoothing=0.1", "data.balanced=true"]
    trainer, datamodule, model = build(compose_cfg([*TINY, *args, *more, "scheduler=none"], project))
    seen = {}

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.setdefault("train", batch[1])

        def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
            seen.setdefault("val", batch[1])

    trainer.callbacks.append(Record())
    trainer.fit(model, datamodule=datamodule)
    soft = seen["train"]
    assert soft.shape == (100, 10) and torch.allclose(soft.sum(1), torch.ones(100))
    assert seen["val"].dtype == torch.int64
    weights = inverse_frequency(datamodule.class_counts())
    assert torch.allclose(model.class_weight, weights) and not torch.equal(weights, torch.ones(10))
    metrics = trainer.callback_metrics
    assert all(math.isfinite(float(metrics[k])) for k in ("train/loss", "train/acc", "val/loss"))
