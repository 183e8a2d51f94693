"""The levers that are options: each acts. EMA, SWA, pruning, Muon, dropout (exp_decay: test_config.py)."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging, StochasticWeightAveraging

from brisk.callbacks import Pruning
from brisk.models import ImageClassifier
from brisk.models.sparsity import sparsity
from brisk.run.builder import build_model
from brisk.run.prepare import build, build_trainer
from helpers import TINY, compose_cfg, main_in_process, read_summary

QUICK = [*TINY, "callbacks.progress_bar=null", "trainer.num_sanity_val_steps=0"]
QUICK += ["trainer.limit_train_batches=5", "trainer.limit_val_batches=2", "trainer.limit_test_batches=1"]
DEFAULTS = {"model_checkpoint", "last_checkpoint", "lr_monitor", "progress_bar", "plots"}


def fit(overrides: list[str], root, extra_callbacks=()):
    """An in-process fit of the tiny config, writing under `root` (a `project` fixture: a fresh output directory)."""
    cfg = compose_cfg([*QUICK, "callbacks.plots=null", *overrides], root)  # plots: drawn in the CLI run below
    L.seed_everything(0)
    trainer, datamodule, model = build(cfg)
    trainer.callbacks.extend(extra_callbacks)
    trainer.fit(model, datamodule=datamodule)
    return cfg, trainer, datamodule, model


@pytest.mark.parametrize(
    ("option", "levers"),
    [("ema", {"ema"}), ("swa", {"swa"}), ("prune", {"prune"}), ("[ema,prune]", {"ema", "prune"}), ("none", set())],
)
def test_lever_callbacks_keep_the_defaults(option, levers, brisk_root):
    cfg = compose_cfg([*TINY, f"callbacks={option}"], brisk_root)
    keys = {k for k, v in (cfg.callbacks or {}).items() if v is not None}
    assert keys == (set() if option == "none" else DEFAULTS | levers)
    kinds = {EMAWeightAveraging: "ema", StochasticWeightAveraging: "swa", Pruning: "prune"}
    built = {name for kind, name in kinds.items() for c in build_trainer(cfg).callbacks if isinstance(c, kind)}
    assert built == levers


def test_ema_is_what_validation_and_test_see(project):
    _, trainer, datamodule, model = fit(["callbacks=ema", "callbacks.ema.decay=0.9", "trainer.max_epochs=2"], project)
    checkpoint = torch.load(trainer.checkpoint_callback.dirpath + "/last.ckpt", weights_only=True)
    averaged, raw = checkpoint["state_dict"], checkpoint["current_model_state"]
    assert not torch.allclose(averaged["net.0.weight"], raw["net.0.weight"], atol=1e-4)
    logged = float(trainer.callback_metrics["val/loss"])  # the last epoch's, run just before last.ckpt was written

    def val_loss(state):
        model.load_state_dict(state)
        return L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, limit_val_batches=2).validate(
            model, datamodule=datamodule, verbose=False
        )[0]["val/loss"]

    assert val_loss(averaged) == pytest.approx(logged, rel=1e-5)
    assert val_loss(raw) != pytest.approx(logged, rel=1e-3)
    # brisk-train tests a checkpoint after fit: with EMA it must be the averaged weights that are tested
    trainer.test(model, datamodule=datamodule, ckpt_path=trainer.checkpoint_callback.dirpath + "/last.ckpt")
    assert torch.equal(model.state_dict()["net.0.weight"], averaged["net.0.weight"])


class Snapshots(L.Callback):
    """The net's weights at each training epoch's start and the learning rate each epoch trained with."""

    def __init__(self):
        self.weights, self.lrs = [], []

    def on_train_epoch_start(self, trainer, pl_module):
        self.weights.append({k: v.clone() for k, v in pl_module.net.state_dict().items()})

    def on_train_epoch_end(self, trainer, pl_module):
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_swa_averages_the_weights_at_its_lr(project):
    snap = Snapshots()
    swa = ["callbacks=swa", "callbacks.swa.swa_epoch_start=2", "callbacks.swa.swa_lrs=0.01"]
    # BatchNorm-free: Lightning's SWA would otherwise add an epoch that recomputes the BN statistics
    _, _, _, model = fit([*swa, "+model.net.norm=false", "scheduler=none", "trainer.max_epochs=3"], project, [snap])
    assert snap.lrs[0] == 0.05 and snap.lrs[2] == pytest.approx(0.01)
    # swa_epoch_start=2 (1-based): epochs 1 and 2 (0-based) are averaged, as each starts
    for key, weight in model.net.state_dict().items():
        expected = (snap.weights[1][key] + snap.weights[2][key]) / 2
        assert torch.allclose(weight, expected, atol=1e-6), key
    assert not torch.allclose(model.net.state_dict()["0.weight"], snap.weights[2]["0.weight"], atol=1e-4)


def test_pruning_schedule_rises_to_the_target():
    pruning = Pruning(amount=0.8, start_epoch=1, end_epoch=4)
    steps = [pruning.scheduled(e) for e in range(7)]
    assert steps[0] == 0 and steps[4:] == [0.8] * 3
    assert all(a < b for a, b in zip(steps[:4], steps[1:5], strict=True))
    assert steps[1] - steps[0] > steps[4] - steps[3]  # gradual: large steps first (Zhu & Gupta's cubic)


@pytest.fixture(scope="module")
def pruned_ema_run(tmp_path_factory, brisk_root):
    """One real brisk-train run with two levers at once; the pruning schedule ends with epoch 0 of 2. In this
    process, through brisk-train's entry point: the levers need no process of their own."""
    root = tmp_path_factory.mktemp("pruned")
    (brisk_root / "data").mkdir(exist_ok=True)
    (root / "data").symlink_to(brisk_root / "data", target_is_directory=True)
    run_dir = root / "run"
    args = [*QUICK, "callbacks=[ema,prune]", "callbacks.prune.amount=0.6", "trainer.max_epochs=2"]
    assert main_in_process("train", [*args, f"hydra.run.dir={run_dir}"], root) == 0
    return run_dir


def test_pruning_reaches_its_target_and_checkpoints_load_plain(pruned_ema_run):
    summary = read_summary(pruned_ema_run)
    assert summary["sparsity"]["total"] == pytest.approx(0.6, abs=1e-3)
    assert len(summary["sparsity"]["layers"]) == 4 and min(summary["sparsity"]["layers"].values()) > 0
    assert summary["ckpt_path"].endswith("final.ckpt")  # what was tested: the pruned, averaged weights
    model = ImageClassifier.load_from_checkpoint(summary["ckpt_path"], map_location="cpu", weights_only=True)
    assert sparsity(model)["total"] == pytest.approx(0.6, abs=1e-3)
    for name in ("last.ckpt", "final.ckpt"):
        state = torch.load(pruned_ema_run / "checkpoints" / name, weights_only=True)["state_dict"]
        ImageClassifier(**model.hparams).load_state_dict(state)  # strict: no weight_orig / weight_mask keys


def test_every_run_draws_its_plots(pruned_ema_run):
    for name in ("loss", "accuracy", "lr", "confusion_matrix"):
        data = (pruned_ema_run / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name


def test_muon_learns_and_resumes(project):
    cfg, trainer, datamodule, model = fit(
        ["optimizer=muon", "scheduler=none", "trainer.max_epochs=2", "trainer.limit_train_batches=15"], project
    )
    optimizer = trainer.optimizers[0]
    matrices = [p for p in model.net.parameters() if p.ndim >= 2]
    assert sum(len(g["params"]) for g in optimizer.muon.param_groups) == len(matrices)  # conv filters included
    assert any(p.ndim == 4 for p in matrices)
    # 30 steps at a constant lr 0.02 (seed 0): val acc 0.41, train loss 1.55
    assert float(trainer.callback_metrics["val/acc"]) > 0.3  # chance: 0.1
    assert float(trainer.callback_metrics["train/loss"]) < 2.0  # from ln(10) = 2.30 at the start

    last = trainer.checkpoint_callback.dirpath + "/last.ckpt"
    saved = torch.load(last, weights_only=True)["optimizer_states"][0]["muon"]["state"]
    seen = {}

    class Loaded(L.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.update(copy.deepcopy(trainer.optimizers[0].muon.state_dict()["state"]))  # before any step

    resumed = build_trainer(
        compose_cfg(
            [*QUICK, "callbacks.plots=null", "optimizer=muon", "scheduler=none", "trainer.max_epochs=3"]
            + ["trainer.limit_train_batches=1"],  # one step: the state is checked before it
            project,
        ),
        [Loaded()],
    )
    resumed.fit(build_model(cfg), datamodule=datamodule, ckpt_path=last, weights_only=True)
    assert saved.keys() == seen.keys() and len(saved) == len(matrices)
    assert all(torch.equal(saved[i]["momentum_buffer"], seen[i]["momentum_buffer"]) for i in saved)
    assert resumed.global_step > trainer.global_step


@pytest.mark.parametrize("net", ["simple_cnn", "airbench", "resnet18"])
def test_dropout_is_an_option_of_every_net(net, brisk_root):
    x = torch.randn(2, 3, 32, 32)
    tiny = [o for o in TINY if not o.startswith("model.net.width")]  # simple_cnn's only
    features = {}
    for p, random in ((0.0, False), (0.5, True)):
        model = build_model(compose_cfg([*tiny, f"model={net}", f"model.net.dropout={p}"], brisk_root))
        model.net.get_submodule(_dropout_of(model.net)).register_forward_hook(lambda m, i, o: features.update(o=o))
        model.net.train()
        model.net(x)
        kept = (features["o"] != 0).float().mean()
        assert (kept < 0.8) if random else (kept > 0.99), (net, p, kept)


def _dropout_of(net: torch.nn.Module) -> str:
    return next(name for name, m in net.named_modules() if isinstance(m, torch.nn.Dropout))
