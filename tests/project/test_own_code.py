"""A user's own net, dataset and augmentation, in a package outside src/ that brisk never heard of: registered by
name, imported because the command line says `imports=[...]`, and a run of them goes through brisk-eval,
-predict and -export with the same `imports` and nothing else. A run's files name the classes, never a module."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from omegaconf import OmegaConf

from helpers import TINY, assert_user_error, env_with_tests, main_in_process, run_cli

PACKAGE = {
    "__init__.py": "",
    "nets.py": """
        from torch import nn

        from brisk.registry import NETS


        @NETS.register("pooled_linear")
        class PooledLinear(nn.Sequential):
            def __init__(self, num_classes: int, pool: int = 4, dropout: float = 0.0) -> None:
                head = nn.Linear(3 * pool * pool, num_classes)
                super().__init__(nn.AdaptiveAvgPool2d(pool), nn.Flatten(), nn.Dropout(dropout), head)
    """,
    "data.py": """
        from brisk.data import SyntheticDataModule
        from brisk.registry import DATASETS


        @DATASETS.register("few_synthetic")
        class FewSynthetic(SyntheticDataModule):
            '''The generated set with its first `classes` classes only.'''

            def __init__(self, classes: int = 4, **common) -> None:
                super().__init__(**common)

            @property
            def class_names(self) -> list[str]:
                return super().class_names[: self.hparams.classes]

            def read(self, split):
                if (found := super().read(split)) is None:  # no such split (val: taken from train)
                    return None
                images, labels = found
                keep = labels < self.hparams.classes
                return images[keep], labels[keep]
    """,
    "ops.py": """
        import torch

        from brisk.registry import AUGMENTS


        @AUGMENTS.register("invert", stage="uint8")
        class Invert:
            '''Each image's colours inverted with probability `invert`.'''

            def __init__(self, invert: float) -> None:
                self.p = float(invert)

            def __call__(self, x, flips=None):
                chosen = torch.rand(x.shape[0], device=x.device) < self.p
                return torch.where(chosen.view(-1, 1, 1, 1), 255 - x, x)
    """,
}
IMPORTS = "imports=[my_pkg.nets,my_pkg.data,my_pkg.ops]"


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "mine"
    (root / "my_pkg").mkdir(parents=True)
    for name, text in PACKAGE.items():
        (root / "my_pkg" / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(root))
    return root


def test_own_classes_train_and_their_run_evaluates_predicts_and_exports_by_name(package, tmp_path, brisk_root):
    run = tmp_path / "run"
    train = [o for o in TINY if not o.startswith(("data=", "model.net"))]
    train += ["data=synthetic", "data.type=few_synthetic", "+data.classes=3", "+data.augment.invert=0.5"]
    train += ["data.val_size=100", "data.batch_size=50"]  # 3 classes of 10: ~600 images
    train += ["model.net.type=pooled_linear", "~model.net.width", "~model.net.dropout", "+model.net.pool=2"]
    train += ["trainer.max_epochs=1", "scheduler=none"]
    assert main_in_process("train", [IMPORTS, *train, f"hydra.run.dir={run}"], brisk_root) == 0
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")
    assert (saved.model.net.type, saved.data.type, saved.data.augment.invert) == ("pooled_linear", "few_synthetic", 0.5)
    assert "imports" not in saved  # a run's files never say what to import
    ckpt = run / "checkpoints" / "last.ckpt"
    hparams = torch.load(ckpt, weights_only=True)["hyper_parameters"]
    assert hparams["net"] == {"type": "pooled_linear", "pool": 2} and len(hparams["class_names"]) == 3

    assert (
        main_in_process("evaluate", [IMPORTS, f"ckpt_path={ckpt}", f"hydra.run.dir={tmp_path / 'ev'}"], brisk_root) == 0
    )
    assert set(json.loads((tmp_path / "ev" / "eval.json").read_text())["metrics"]) >= {"test/acc", "test/loss"}

    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        from torchvision.io import write_png

        write_png(torch.randint(0, 255, (3, 32, 32), dtype=torch.uint8), str(images / f"{i}.png"))
    args = [IMPORTS, f"ckpt_path={ckpt}", f"inputs={images}", f"hydra.run.dir={tmp_path / 'pr'}"]
    assert main_in_process("predict", args, brisk_root) == 0
    assert len((tmp_path / "pr" / "predictions.csv").read_text().splitlines()) == 1 + 3

    args = [IMPORTS, f"ckpt_path={ckpt}", "export.bench_runs=1", f"hydra.run.dir={tmp_path / 'ex'}"]
    assert main_in_process("export", args, brisk_root) == 0
    assert list((tmp_path / "ex").glob("*.onnx"))

    # A fresh process without the imports: the run's names are looked up, nothing is imported, one line says why.
    env = {**env_with_tests(), "PYTHONPATH": f"{package}:{env_with_tests()['PYTHONPATH']}"}
    proc = run_cli("evaluate", [f"ckpt_path={ckpt}"], brisk_root, check=False, env=env)
    assert_user_error(proc, "refused model.net.type=pooled_linear: no net is registered", "imports=[")
