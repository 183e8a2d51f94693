"""model=timm, offline: a timm model by name, its weights from a file the test saves first, a frozen backbone, a
lower backbone learning rate, and the fine-tune recipe."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from brisk.checkpoints import restore
from brisk.errors import BriskError
from brisk.models.nets import TimmNet
from brisk.run.prepare import build
from helpers import TINY, assert_user_error, brisk_train, compose_cfg, main_in_process, read_summary

timm = pytest.importorskip("timm")

NAME = "test_resnet"  # timm's own tiny test model: 0.37M parameters, BatchNorm, a Linear head `fc`
# Smaller than TINY (test_resnet costs ~0.25 s a step of 100 images on 2 cores): 80 training images, 40 to test.
TIMM = [
    *(a for a in TINY if not a.startswith(("model.", "data."))),
    *("data.synthetic.n_train=120", "data.synthetic.n_test=40", "data.val_size=40", "data.batch_size=20"),
    "model=timm",
    f"model.net.name={NAME}",
]
FIT = ["trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=1", "callbacks=none"]


@pytest.fixture
def weights(tmp_path):
    """The state_dict of a fresh timm test_resnet with its 1000-class head, as torch.save writes it."""
    torch.manual_seed(1)
    state = timm.create_model(NAME).state_dict()
    torch.save(state, tmp_path / "weights.pth")
    return tmp_path / "weights.pth", state


def test_weights_load_from_a_file_with_a_new_head_and_their_own_normalization(weights, tmp_path):
    from safetensors.torch import save_file

    path, state = weights
    save_file(state, tmp_path / "weights.safetensors")
    for file in (path, tmp_path / "weights.safetensors"):
        net = TimmNet(num_classes=3, name=NAME, weights=str(file))
        loaded = net.model.state_dict()
        assert torch.equal(loaded["conv1.0.weight"], state["conv1.0.weight"])
        assert torch.equal(loaded["bn1.running_var"], state["bn1.running_var"])
        assert loaded["fc.weight"].shape[0] == 3  # the head is new: 3 classes, not the file's 1000
        assert net.input_stats == ([127.5] * 3, [127.5] * 3)  # test_resnet's pretrained_cfg: mean = std = 0.5
        assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 3)  # CIFAR's 32x32 as well as its 160x160
    assert TimmNet(num_classes=3, name=NAME).input_stats is None  # no weights: the data's own statistics


def test_frozen_backbone_stays_as_loaded_and_the_run_evaluates(weights, project, capsys, monkeypatch):
    """brisk-train with a frozen backbone: the checkpoint's backbone (BatchNorm statistics included) is the file's,
    the head trained, the inputs were normalized by the backbone's statistics, and brisk-eval rebuilds the run
    (TimmNet is a class a run's files may name)."""
    path, state = weights
    args = [*TIMM, *FIT[:3], f"model.net.weights={path}", "model.freeze_backbone=true", "callbacks.progress_bar=null"]
    assert main_in_process("train", args, project) == 0
    (run,) = (project / "logs/train/runs").iterdir()
    summary = read_summary(run)
    assert summary["normalization"] == {"mean": [127.5] * 3, "std": [127.5] * 3}
    trained = torch.load(run / "checkpoints/last.ckpt", weights_only=True)["state_dict"]
    for key in ("conv1.0.weight", "layer1.0.conv1.weight", "bn1.running_mean", "bn1.weight"):
        assert torch.equal(trained[f"net.model.{key}"], state[key]), key
    assert trained["net.model.fc.weight"].shape == (10, state["fc.weight"].shape[1])
    assert main_in_process("evaluate", [f"ckpt_path={run}/checkpoints/last.ckpt"], project) == 0
    restore.check({"model": {"net": {"type": "timm"}}}, "a run's config")


class RecordLrs(L.Callback):
    """Each group's (lr_mult, lr) at the start of every training step."""

    def __init__(self) -> None:
        self.steps = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.steps.append([(g.get("lr_mult", 1.0), g["lr"]) for g in trainer.optimizers[0].param_groups])


def test_backbone_lr_multiplier_holds_through_onecycle(project):
    """Every step the backbone's groups run at a tenth of the head's lr under OneCycle, which sets one max_lr for
    every group (LambdaLR schedules scale each group's own lr); frozen parameters are in no group."""
    cfg = compose_cfg([*TIMM, *FIT, "model.backbone_lr_mult=0.1"], project)  # scheduler=onecycle: the default
    trainer, datamodule, model = build(cfg)
    record = RecordLrs()
    trainer.callbacks.append(record)
    trainer.fit(model, datamodule=datamodule)
    groups = trainer.optimizers[0].param_groups
    head = {id(p) for p in model.net.get_classifier().parameters()}
    backbone = [g for g in groups if g.get("lr_mult") == 0.1]
    assert len(backbone) == 2 and len(groups) == 4  # decay and no decay, for each
    assert all(id(p) not in head for g in backbone for p in g["params"])
    assert len(record.steps) == 3
    for lrs in record.steps:
        head_lr = next(lr for mult, lr in lrs if mult == 1)
        assert head_lr > 0
        assert [lr for mult, lr in lrs if mult != 1] == pytest.approx([0.1 * head_lr] * 2)

    cfg = compose_cfg([*TIMM, "model.freeze_backbone=true", "scheduler=none"], project)
    _, _, model = build(cfg)
    trainable = {id(p) for p in model.net.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in model.net.get_classifier().parameters()}
    grouped = {id(p) for g in model.configure_optimizers().param_groups for p in g["params"]}
    assert grouped == trainable


@pytest.mark.parametrize(
    "override, needle",
    [
        ("model.net.name=resnet_18", "Close: resnet18"),
        ("model.net.name=hf-hub:timm/resnet18.a1_in1k", "a hub name"),
        ("model.net.weights=/nonexistent/weights.pth", "no such file"),
        ("model.net.pretrained=true", "not in the local cache"),
    ],
)
def test_bad_name_missing_file_or_empty_cache_is_one_line(override, needle, project, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))  # an empty cache, whatever this machine holds
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty-torch"))
    proc = brisk_train([*TIMM, "callbacks.progress_bar=null", override], project, capsys, monkeypatch)
    assert_user_error(proc, override.split("=")[0], needle)
    assert not (project / "logs/train/runs").exists()  # refused before the run directory is kept


def test_a_file_of_other_objects_or_another_model_is_refused(weights, tmp_path):
    path, _ = weights
    torch.save({"conv": torch.nn.Conv2d(1, 1, 1)}, tmp_path / "module.pth")  # a pickled module, not tensors
    with pytest.raises(BriskError, match="holds pickled objects"):
        TimmNet(num_classes=3, name=NAME, weights=str(tmp_path / "module.pth"))
    with pytest.raises(BriskError, match="not weights of this model: it lacks conv_stem.weight"):
        TimmNet(num_classes=3, name="test_efficientnet", weights=str(path))


def test_freezing_a_net_without_a_head_and_a_bad_multiplier_are_refused(project, capsys, monkeypatch):
    for override, needle in (
        ("model.freeze_backbone=true", "needs a net that names its head with get_classifier()"),
        ("model.backbone_lr_mult=0", "give a positive number"),
    ):
        argv = [*(a for a in TIMM if not a.startswith("model")), "callbacks.progress_bar=null", override]
        assert_user_error(brisk_train(argv, project, capsys, monkeypatch), override, needle)


def test_the_finetune_recipe_composes(project):
    cfg = compose_cfg(["experiment=finetune", "data.root=/images", "model.net.weights=/w.safetensors"], project)
    assert cfg.data.type == "image_folder"
    assert cfg.data.image_size == 224
    assert cfg.model.net.type == "timm"
    assert (cfg.model.net.name, cfg.model.net.weights) == ("resnet18.a1_in1k", "/w.safetensors")
    assert cfg.model.backbone_lr_mult == 0.1 and cfg.optimizer.type == "adamw"
    assert cfg.scheduler.type == "cosine"
