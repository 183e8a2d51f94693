"""brisk-train on data that is not CIFAR-10: an image folder, and a dataset added by the recipe in docs/data.md.

Both run brisk-train's own entry point in this process (Hydra, the builder, fit, test, summary.json).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from PIL import Image

from brisk.callbacks import RankSeed
from brisk.data import augment as aug
from brisk.registry import DATASETS
from brisk.run.builder import build_datamodule, build_model
from helpers import compose_cfg, main_in_process, run_cli, run_dir_of

ROOT = Path(__file__).resolve().parents[2]
TINY_RUN = [
    "model.net.width=4",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.max_epochs=1",
    "trainer.enable_model_summary=false",
    "callbacks.progress_bar=null",
    "augment=none",
]


def brisk_train(args: list[str], run_dir: Path) -> dict:
    """brisk-train `args` in this process (helpers.main_in_process), rooted at the run's parent; its summary.json."""
    assert main_in_process("train", [*TINY_RUN, *args, f"hydra.run.dir={run_dir}"], run_dir.parent) == 0
    return json.loads((run_dir / "summary.json").read_text())


def test_image_folder_trains_without_a_test_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BRISK_ROOT", str(tmp_path))
    rng = np.random.default_rng(0)
    for c, name in enumerate(["apple", "pear", "plum"]):
        for i in range(12):
            tint = np.zeros((24, 30, 3), np.uint8)
            tint[..., c] = 200
            image = np.clip(tint + rng.integers(0, 50, tint.shape), 0, 255).astype(np.uint8)
            path = tmp_path / "fruit" / "train" / name / f"{i}.{'png' if i % 2 else 'jpg'}"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(path)
    args = ["data=image_folder", f"data.root={tmp_path / 'fruit'}", "data.image_size=16", "data.val_size=6"]
    summary = brisk_train([*args, "data.batch_size=10"], tmp_path / "run")
    assert summary["class_names"] == ["apple", "pear", "plum"]
    assert summary["global_step"] == 3 and "test/acc" not in summary["metrics"], summary  # no test/: not tested
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["class_names"] == summary["class_names"]
    head = [v for k, v in ckpt["state_dict"].items() if k.startswith("net.") and k.endswith(".weight")][-1]
    assert head.shape[0] == 3  # the net's output follows the data
    assert ckpt["ImageFolderDataModule"]["mean"] == summary["normalization"]["mean"]
    # each class tints one channel: ~(225 + 25 + 25) / 3 per channel, not CIFAR-10's constants
    assert all(80 < m < 100 for m in summary["normalization"]["mean"]), summary["normalization"]


def _docs_block(section: str, language: str) -> str:
    text = (ROOT / "docs" / "data.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{language}\n(.*?)```", body, re.S).group(1)


def test_adding_a_dataset_as_the_docs_say(tmp_path, monkeypatch):
    """The "Adding a dataset" recipe of docs/data.md, literally: its module and its YAML, and the command it shows."""
    conf = tmp_path / "conf"
    (conf / "data").mkdir(parents=True)
    (tmp_path / "npz_data.py").write_text(_docs_block("Adding a dataset", "python"))
    (conf / "data" / "npz.yaml").write_text(_docs_block("Adding a dataset", "yaml"))
    rng = np.random.default_rng(1)
    for split, n in [("train", 40), ("test", 10)]:
        y = rng.integers(0, 4, n)
        x = (rng.integers(0, 60, (n, 8, 8, 3)) + 50 * y[:, None, None, None]).astype(np.uint8)
        np.savez(tmp_path / f"{split}.npz", x=x, y=y)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("BRISK_ROOT", str(tmp_path))
    command = _docs_block("Adding a dataset", "bash").strip().splitlines()[-1].split()
    assert command[:3] == ["PYTHONPATH=.", "brisk-train", "data=npz"]  # run from the folder that holds npz_data.py
    args = [a.replace("$PWD", str(tmp_path)).replace("<folder>", str(tmp_path)) for a in command[2:]]
    summary = brisk_train([*args, "data.batch_size=10", "data.val_size=10"], tmp_path / "run")
    assert summary["class_names"] == ["0", "1", "2", "3"]
    assert summary["global_step"] == 3 and "test/acc" in summary["metrics"]


@pytest.mark.parametrize("option", ["cifar10", "synthetic", "image_folder"])
def test_every_datamodule_argument_is_a_data_key(option, tmp_path):
    """So `data.<argument>=...` works without a `+` (data.download=false among them)."""
    cfg = compose_cfg([f"data={option}", "data.download=false" if option == "cifar10" else "data.dedup=true"], tmp_path)
    cls = DATASETS.get(cfg.data.type)
    arguments = {
        name
        for klass in cls.__mro__
        if klass.__module__.startswith("brisk.")
        for name, p in inspect.signature(klass.__init__).parameters.items()
        if name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD
    }
    assert arguments <= set(cfg.data), f"data={option}: {sorted(arguments - set(cfg.data))} need a +"


def test_ranks_draw_their_own_augmentations_and_data_code_leaves_the_rng_alone(tmp_path, monkeypatch):
    """The per-rank reseed and the model's memory format are no DataModule's business."""
    images = torch.randint(0, 256, (64, 3, 16, 16), dtype=torch.uint8)
    crops = []
    for rank in ("0", "1"):  # a real Trainer of a 2-process DDP job, as each rank builds it
        monkeypatch.setenv("LOCAL_RANK", rank)
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_progress_bar=False)
        assert trainer.global_rank == int(rank) and trainer.world_size == 2
        torch.manual_seed(42)  # seed_everything(cfg.seed): the same on every rank
        seed = RankSeed()
        seed.setup(trainer, None, "fit")
        crops.append(aug.random_crop(images, 4, flip=True))
    assert not torch.equal(crops[0], crops[1])
    monkeypatch.delenv("LOCAL_RANK")
    for name in ("a", "b"):
        (tmp_path / "images" / "train" / name).mkdir(parents=True)
        Image.fromarray(np.full((8, 8, 3), len(name), np.uint8)).save(tmp_path / "images" / "train" / name / "0.png")
    data = ["data=image_folder", f"data.root={tmp_path / 'images'}", "data.val_size=0", "data.channels_last=true"]
    cfg = compose_cfg(data, tmp_path)
    datamodule = build_datamodule(cfg)
    datamodule.prepare_data()
    state = torch.get_rng_state()
    datamodule.setup("fit")
    assert torch.equal(torch.get_rng_state(), state)
    model = build_model(cfg, datamodule)
    conv = next(m for m in model.net.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.slow
def test_ddp_trains_on_an_image_folder(tmp_path, brisk_root):
    """Two gloo ranks: rank 0 decodes the cache in prepare_data, both map it, their shards cover the split."""
    from helpers import read_summary

    for c, name in enumerate(["x", "y"]):
        for i in range(20):
            path = tmp_path / "images" / "train" / name / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((12, 12, 3), 40 + 150 * c + i, np.uint8)).save(path)
    args = [*TINY_RUN, "data=image_folder", f"data.root={tmp_path / 'images'}", "data.val_size=8"]
    args += ["data.batch_size=8", "strategy=ddp", "trainer.devices=2", "scheduler=none"]  # OneCycle needs > 4 steps
    summary = read_summary(run_dir_of(run_cli("train", args, brisk_root)))
    assert summary["world_size"] == 2 and summary["global_step"] == 32 // 8
    assert summary["class_names"] == ["x", "y"]
    assert len(list((tmp_path / "images" / ".brisk-cache").iterdir())) == 1


def test_adding_a_net_as_the_readme_says(tmp_path, monkeypatch):
    """extending.md's "Add a net", word for word: its Python example as a file of brisk.models.nets (as in a clone), its
    YAML as conf/model/tiny_net.yaml (on Hydra's search path, in this process), then `brisk-train model=tiny_net`
    with no other edit: the net trains, with as many outputs as the data has classes, and the checkpoint names it
    by its registered name."""
    import brisk.models.nets

    readme = (ROOT / "docs" / "extending.md").read_text().split("**Add a net**", 1)[1]
    net = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    block = re.search(r"```yaml\n(.*?)```", readme, re.S).group(1)
    assert "type: tiny_net" in block and '@NETS.register("tiny_net")' in net
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "tiny_net.py").write_text(net)
    monkeypatch.setattr(brisk.models.nets, "__path__", [*brisk.models.nets.__path__, str(tmp_path / "nets")])
    monkeypatch.delitem(sys.modules, "brisk.models.nets.tiny_net", raising=False)
    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "tiny_net.yaml").write_text(block)
    data = ["data=synthetic", "data.synthetic.n_train=200", "data.synthetic.n_test=100", "data.val_size=100"]
    tiny = [*data, "data.batch_size=100", *(a for a in TINY_RUN if not a.startswith("model.net."))]
    args = [f"hydra.searchpath=[file://{conf}]", "model=tiny_net", "model.net.dropout=0.2"]
    run_dir = tmp_path / "run"
    assert main_in_process("train", [*tiny, *args, f"hydra.run.dir={run_dir}"], tmp_path) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["net"]["type"] == "tiny_net"
    assert ckpt["hyper_parameters"]["net"]["dropout"] == 0.2
    assert ckpt["state_dict"]["net.head.1.weight"].shape == (len(summary["class_names"]), 8)
