"""model=timm, offline: a timm model by name, its weights from a file the test saves first or from a Hugging Face
cache the test fills, a frozen backbone, a lower backbone learning rate, and the fine-tune recipe."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
import warnings

import lightning as L
import pytest
import torch

from brisk.checkpoints import restore
from brisk.errors import BriskError
from brisk.models.nets import TimmNet
from brisk.run.prepare import build
from helpers import (
    TINY,
    assert_user_error,
    brisk_train,
    compose_cfg,
    env_with_tests,
    main_in_process,
    read_summary,
    run_cli,
)

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
    ],
)
def test_bad_name_or_missing_file_is_one_line(override, needle, project, capsys, monkeypatch):
    proc = brisk_train([*TIMM, "callbacks.progress_bar=null", override], project, capsys, monkeypatch)
    assert_user_error(proc, override.split("=")[0], needle)
    assert not (project / "logs/train/runs").exists()  # refused before the run directory is kept


def hub_env(tmp_path, **extra: str) -> dict[str, str]:
    """An environment whose Hugging Face and torch hub caches are the test's own (empty until it fills them), with
    none of this machine's HF_* settings. huggingface_hub reads these variables once, when it is imported, so
    they take effect only in a new process: the tests below start one, as a user would."""
    env = {k: v for k, v in env_with_tests().items() if not k.startswith("HF_")}
    hub = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf/hub")}
    return {**env, **hub, "TORCH_HOME": str(tmp_path / "torch"), **extra}


@pytest.mark.parametrize("offline", ["no network", "HF_HUB_OFFLINE=1"])
def test_pretrained_offline_with_an_empty_cache_is_one_line_and_quick(offline, project, tmp_path):
    """timm's hub loading with nothing to load from: one line naming model.net.weights, and soon. Without the
    check first, huggingface_hub's retries sleep 23 s for each of the two file names timm asks for."""
    with socket.socket() as closed:  # bound but not listening: a connection to it is refused, network or not
        closed.bind(("127.0.0.1", 0))
        where = {"HF_ENDPOINT": f"http://127.0.0.1:{closed.getsockname()[1]}"}
        env = hub_env(tmp_path, **(where if offline == "no network" else {"HF_HUB_OFFLINE": "1"}))
        start = time.monotonic()
        args = [*TIMM, "callbacks.progress_bar=null", "model.net.pretrained=true"]
        proc = run_cli("train", args, project, timeout=300, check=False, env=env)
        took = time.monotonic() - start
    why = "cannot be downloaded (" if offline == "no network" else "cannot be downloaded (HF_HUB_OFFLINE is set)"
    line = assert_user_error(proc, "model.net.pretrained=true", "not in the local cache", why, "model.net.weights=")
    assert "hf-hub timm/test_resnet.r160_in1k" in line
    assert took < 46, f"{took:.0f} s to refuse"  # the whole command, startup included; the retries alone: 46 s
    assert not (project / "logs/train/runs").exists()


def test_pretrained_loads_the_weights_of_a_filled_hub_cache_offline(tmp_path):
    """With HF_HUB_OFFLINE=1 and timm's weights in the Hugging Face cache (laid out as huggingface_hub downloads
    them), model.net.pretrained=true builds the net with exactly those weights, a new head, and their statistics."""
    from safetensors.torch import save_file

    state = timm.create_model(NAME).state_dict()
    torch.manual_seed(2)
    for value in state.values():  # values no initialization gives, in every tensor, running statistics included
        if value.is_floating_point():
            value.uniform_(0.5, 1.5)
    hub_id = timm.models.get_pretrained_cfg(NAME).hf_hub_id  # the repository timm loads NAME's weights from
    repo = tmp_path / "hf/hub" / f"models--{hub_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    save_file(state, repo / "blobs/weights")
    blob = repo / "blobs" / hashlib.sha256((repo / "blobs/weights").read_bytes()).hexdigest()  # named by its hash
    (repo / "blobs/weights").rename(blob)
    revision = hashlib.sha1(b"a commit").hexdigest()
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs/main").write_text(revision)

    built = tmp_path / "built.pth"
    script = (
        "import sys, torch; from brisk.models.nets import TimmNet\n"
        "net = TimmNet(num_classes=3, name=sys.argv[1], pretrained=True)\n"
        "torch.save(net.model.state_dict(), sys.argv[2]); print(net.input_stats)"
    )
    env = hub_env(tmp_path, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-c", script, NAME, str(built)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = torch.load(built, weights_only=True)
    for key, value in state.items():
        if not key.startswith("fc."):
            assert torch.equal(loaded[key], value), key
    assert loaded["fc.weight"].shape == (3, state["fc.weight"].shape[1])  # timm's new head for 3 classes
    assert proc.stdout.strip().splitlines()[-1] == str(([127.5] * 3, [127.5] * 3))  # test_resnet's mean = std = 0.5


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


def test_a_run_reads_the_weights_file_once_and_says_nothing_of_meta_parameters(weights, project, capsys):
    """The net is built once a run: the file is read once (opens counted by an audit hook, which stays for the
    session, so it counts only this test's file), and no meta-device build copies the weights into nothing, with
    torch's warning per tensor that reads as if the weights had not loaded."""
    path, _ = weights
    opens = []
    sys.addaudithook(lambda event, args: opens.append(args) if event == "open" and str(args[0]) == str(path) else None)
    args = [*TIMM, *FIT[:3], f"model.net.weights={path}", "callbacks.progress_bar=null"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main_in_process("train", [*args, "trainer.enable_model_summary=true"], project) == 0
    assert len(opens) == 1, opens
    said = capsys.readouterr()
    shown = [str(w.message) for w in caught] + [said.out, said.err]
    assert not [m for m in shown if "meta parameter" in m], shown
