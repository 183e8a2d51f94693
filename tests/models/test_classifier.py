"""The classifier's contract with its users: the logged training loss is the loss it optimizes, a Python user
gets the CLI's defaults, and weight decay has one key."""

from __future__ import annotations

import csv
import inspect

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from brisk.callbacks import RunPlots
from brisk.errors import BriskError
from brisk.models import ImageClassifier
from brisk.run.builder import build_model
from brisk.run.prepare import build
from brisk.utils.explain import explain
from helpers import BASE, RUNS, TINY, assert_user_error, brisk_train, compose_cfg, tree


def test_logged_train_loss_is_the_optimized_loss_with_l1(project):
    """train/loss (per logged step and per epoch) is cross-entropy + l1 * sum|w| over the conv and linear
    weights, recomputed here from the weights each step starts with; train/ce is the cross-entropy alone."""
    l1 = 1e-3  # its term is ~0.1 against a cross-entropy of ~2.3: far above the tolerance
    args = ["trainer.max_epochs=1", "trainer.limit_train_batches=10", "trainer.limit_val_batches=0"]
    cfg = compose_cfg([*TINY, *args, "callbacks=none", "scheduler=none", f"model.l1={l1}"], project)
    trainer, datamodule, model = build(cfg)
    optimized, ce = [], []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            x, y = batch
            with torch.no_grad():
                loss = float(F.cross_entropy(pl_module(x), y))
                layers = [m for m in pl_module.net.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
                penalty = l1 * sum(float(m.weight.abs().sum()) for m in layers)
            ce.append(loss)
            optimized.append(loss + penalty)

    trainer.callbacks.append(Record())
    trainer.fit(model, datamodule=datamodule)
    with open(f"{trainer.logger.log_dir}/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    steps = {int(r["step"]): float(r["train/loss_step"]) for r in rows if r.get("train/loss_step")}
    assert sorted(steps) == [4, 9]  # log_every_n_steps=5
    assert steps == {s: pytest.approx(optimized[s], rel=1e-5) for s in steps}
    (epoch,) = [r for r in rows if r.get("train/loss")]
    assert float(epoch["train/loss"]) == pytest.approx(sum(optimized) / len(optimized), rel=1e-5)
    assert float(epoch["train/ce"]) == pytest.approx(sum(ce) / len(ce), rel=1e-5)


def test_the_loss_plot_holds_the_cross_entropy_beside_the_optimized_loss(project, tmp_path):
    """With an L1 term train/loss is not what val/loss measures: loss.png draws train/ce too."""
    args = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]
    cfg = compose_cfg([*TINY, *args, "callbacks=none", "scheduler=none", "model.l1=1e-3"], project)
    trainer, datamodule, model = build(cfg)
    plots = RunPlots(str(tmp_path))
    trainer.callbacks.append(plots)
    trainer.fit(model, datamodule=datamodule)
    assert {"train/loss", "train/ce", "val/loss"} <= set(plots.epochs[0])
    assert (tmp_path / "loss.png").stat().st_size > 0


def test_a_python_user_gets_the_cli_defaults(brisk_root):
    """ImageClassifier(net=..., optimizer=..., class_names=...) is the model brisk-train builds by default."""
    cfg = compose_cfg(TINY, brisk_root)
    cli = build_model(cfg)
    net, optimizer = OmegaConf.to_container(cfg.model.net), OmegaConf.to_container(cfg.optimizer)
    python = ImageClassifier(net=net, optimizer=optimizer, class_names=cli.hparams.class_names)
    assert {**python.hparams, "scheduler": None} == {**cli.hparams, "scheduler": None}
    decay, no_decay = python.configure_optimizers().param_groups
    assert decay["weight_decay"] == cfg.model.weight_decay > 0
    assert no_decay["weight_decay"] == 0  # biases and norm parameters


def test_every_classifier_argument_is_a_model_key_with_its_default(brisk_root):
    """brisk.run.schemas: each ImageClassifier knob is a model key without a `+`, its default the signature's own, not a
    copy in YAML; a value of the wrong type is refused while composing, naming the key."""
    model = compose_cfg(["model.l1=0.5"], brisk_root).model
    knobs = {k: p.default for k, p in inspect.signature(ImageClassifier).parameters.items() if p.default is not p.empty}
    del knobs["scheduler"]  # its own group, as the optimizer
    assert {k: model[k] for k in knobs} == {**knobs, "l1": 0.5}
    with pytest.raises(Exception) as error:
        compose_cfg(["model.compile=perhaps"], brisk_root)
    assert explain(error.value).key == "model.compile"


# A weight decay given to the optimizer: the parameter groups' own would override it, so it is refused.
OPTIMIZER_WEIGHT_DECAY = {
    "sgd": ["+optimizer.weight_decay=0.1"],
    "adamw": ["optimizer=adamw", "+optimizer.weight_decay=0.01"],
    "muon": ["optimizer=muon", "+optimizer.weight_decay=0"],
}


@pytest.mark.parametrize("case", OPTIMIZER_WEIGHT_DECAY)
@pytest.mark.usefixtures("restore_logging")
def test_optimizer_weight_decay_is_refused_before_the_data(case, project, capsys, monkeypatch):
    """The check runs before any data is read: the data folder is empty, and the error is still this one."""
    empty = project / "no_data"
    empty.mkdir()
    data = ["data=cifar10", f"data.root={empty}", "data.download=false"]
    before = tree(project)
    proc = brisk_train([*BASE, *data, *OPTIMIZER_WEIGHT_DECAY[case]], project, capsys, monkeypatch)
    assert_user_error(proc, "optimizer.weight_decay=", "model.weight_decay")
    assert not (project / RUNS).exists() or not any((project / RUNS).iterdir())
    assert tree(project) == before


def test_a_python_user_is_refused_an_optimizer_weight_decay():
    optimizer = {"type": "sgd", "lr": 0.05, "weight_decay": 0.1}
    net = {"type": "simple_cnn", "width": 4}
    with pytest.raises(BriskError, match="model.weight_decay"):
        ImageClassifier(net=net, optimizer=optimizer, class_names=[str(i) for i in range(10)])
