"""Batched augmentation: shapes and dtypes kept, a crop is a translation of the padded image, a flip mirrors; the
Kornia ops draw per image, are off without a trace, refuse bad values, train; +show=augment draws a grid."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision

from brisk import build
from brisk.data import augment as aug
from brisk.data import kornia_augment
from brisk.errors import BriskError
from brisk.run import checks
from helpers import TINY, compose_cfg, main_in_process, write


def _images(n=64):
    torch.manual_seed(0)
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)


def test_shape_and_dtype_are_kept():
    x = _images()
    for kwargs in [
        {},
        {"crop_pad": 4},
        {"flip": True},
        {"cutout_size": 8},
        {"crop_pad": 4, "flip": True, "cutout_size": 16},
    ]:
        y = aug.augment(x, **kwargs)
        assert y.shape == x.shape and y.dtype == torch.uint8


def test_crop_is_a_translation_of_the_padded_image():
    x = _images()
    y = aug.random_crop(x, pad=4)
    padded = F.pad(x, (4, 4, 4, 4))
    offsets = set()
    for i in range(len(x)):
        windows = [
            (dy, dx)
            for dy in range(9)
            for dx in range(9)
            if torch.equal(padded[i, :, dy : dy + 32, dx : dx + 32], y[i])
        ]
        assert windows, f"image {i} is not a 32x32 window of its padded original"
        offsets.add(windows[0])
    assert len(offsets) > 10, "offsets should vary across the batch"


def test_flip_mirrors_or_keeps_each_image():
    x = _images(200)
    y = aug.random_flip(x)
    flipped = [torch.equal(y[i], x[i].flip(2)) for i in range(len(x))]
    kept = [torch.equal(y[i], x[i]) for i in range(len(x))]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert 60 < sum(flipped) < 140


def test_cutout_zeroes_one_square_per_image():
    x = torch.full((32, 3, 32, 32), 7, dtype=torch.uint8)
    y = aug.cutout(x, 8)
    zeros = (y == 0).all(1)  # all channels
    for i in range(len(x)):
        rows, cols = zeros[i].nonzero(as_tuple=True)
        assert 0 < len(rows) <= 64
        assert len(rows) == (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1), "the hole is a rectangle"
    assert torch.equal(y[~(y == 0)], x[~(y == 0)])


def test_normalize():
    x = _images()
    y = aug.normalize(x, [127.0] * 3, [64.0] * 3, channels_last=True)
    assert y.dtype == torch.float32 and y.is_contiguous(memory_format=torch.channels_last)
    assert abs(y.mean().item()) < 0.5


# -- rotation, scale, colour jitter, TrivialAugment, random erasing (Kornia, brisk.data.kornia_augment)

NEW_OPS = {
    "rotate": {"rotate": 30},
    "scale": {"scale": [0.7, 1.3]},
    "color_jitter": {"color_jitter": 0.4},
    "policy": {"policy": "trivialaugment"},
    "erasing": {"erasing": 1.0},
}


def _scene(n=16):
    """n copies of one image with edges and colours, so that every op changes it visibly."""
    x = torch.zeros(n, 3, 32, 32, dtype=torch.uint8)
    x[:, 0, 6:26, 10:22] = 220
    x[:, 1, 2:10, 4:28] = 120
    x[:, 2, 20:30, 2:30] = 60
    return x


@pytest.mark.parametrize("key", NEW_OPS)
def test_each_image_gets_its_own_parameters(key):
    """Equal inputs, different outputs: the parameters are drawn per image, not once per batch (torchvision's v2
    transforms draw once per call on a batch). Shape, dtype and device are those of the input."""
    torch.manual_seed(0)
    x = _scene()
    y = aug.augment(x, **NEW_OPS[key])
    assert y.shape == x.shape and y.dtype == torch.uint8 and y.device == x.device
    distinct = {y[i].numpy().tobytes() for i in range(len(y))}
    assert len(distinct) >= 12, f"{key}: only {len(distinct)} different images out of 16 equal inputs"


def test_trivialaugment_picks_an_operation_per_image():
    """Kornia's TrivialAugment picks one operation per batch; brisk's wrapper one per image, iid uniform."""
    torch.manual_seed(0)
    choice = kornia_augment.PerImageChoice([Add(i) for i in range(4)])
    picked = choice(torch.zeros(400, 1)).squeeze(1)
    counts = torch.bincount(picked.long(), minlength=4)
    assert counts.min() > 60, counts  # about 100 each


class Add(torch.nn.Module):
    def __init__(self, value: int) -> None:
        super().__init__()
        self.value = value

    def forward(self, x):
        return x + self.value


def test_rotation_by_zero_and_scale_one_are_identity():
    x = _images(32)
    y = aug.augment(x, rotate=0, scale=[1.0, 1.0])  # scale given: the warp runs, with an identity matrix
    assert (y.int() - x.int()).abs().max() <= 1
    assert torch.equal(aug.augment(x, color_jitter=0, erasing=0, policy=None), x)


def test_off_keys_leave_the_fast_path_as_it_was(monkeypatch):
    """All new keys off: the same draws and the same bytes as crop + flip + cutout alone, and no Kornia import."""
    x = _images()
    off = {"rotate": 0, "scale": None, "color_jitter": 0, "policy": None, "erasing": 0}
    torch.manual_seed(1)
    a = aug.augment(x, crop_pad=4, flip=True, cutout_size=8)
    monkeypatch.setitem(sys.modules, "kornia", None)  # any `import kornia...` now raises ImportError
    torch.manual_seed(1)
    assert torch.equal(aug.augment(x, crop_pad=4, flip=True, cutout_size=8, **off), a)
    with pytest.raises(ImportError):  # the same call with one op on does import it
        aug.augment(x, **{**off, "rotate": 7.25})


BAD = [
    ("rotate", -5, r"data.augment.rotate=-5 must be a number in 0..180"),
    (
        "scale",
        [1.2, 0.8],
        r"data.augment.scale=\[1.2, 0.8\] must be a zoom range .* e.g. data.augment.scale=\[0.8,1.2\]",
    ),
    ("scale", 0.9, r"data.augment.scale=0.9 must be a range \[low, high\]"),
    ("erasing", 1.5, r"data.augment.erasing=1.5 must be a number in \[0, 1\]"),
    ("color_jitter", -0.1, r"data.augment.color_jitter=-0.1 must be a number in \[0, 1\]"),
    (
        "policy",
        "autoaugment",
        r"data.augment.policy='autoaugment' is not a policy .* data.augment.policy=trivialaugment",
    ),
]


def test_bad_values_are_refused_in_one_line(brisk_root):
    cfg = compose_cfg([*TINY, "augment=[rotate_scale,jitter,trivialaugment,erasing]"], brisk_root)
    checks.validate(cfg)  # the shipped values pass
    for key, bad, message in BAD:
        good, cfg.data.augment[key] = cfg.data.augment[key], bad
        with pytest.raises(BriskError, match=message) as caught:
            checks.validate(cfg)
        assert "\n" not in str(caught.value)
        cfg.data.augment[key] = good


def test_a_tiny_run_trains_with_every_op_on(project):
    """A real fit of two steps, every op on, through the DataModule's on_after_batch_transfer."""
    short = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "callbacks=none"]
    ops = "augment=[rotate_scale,jitter,trivialaugment,erasing]"
    trainer, datamodule, model = build(compose_cfg([*TINY, *short, ops, "trainer.log_every_n_steps=1"], project))
    assert datamodule.hparams.augment["policy"] == "trivialaugment" and datamodule.hparams.augment["rotate"] == 15
    trainer.fit(model, datamodule=datamodule)
    assert trainer.global_step == 2 and math.isfinite(float(trainer.callback_metrics["train/loss"]))


def test_show_augment_writes_a_grid_and_trains_nothing(project, capsys):
    run_dir = project / "show"
    overrides = [*TINY, "augment=rotate_scale", "+show=augment", f"hydra.run.dir={run_dir}"]
    assert main_in_process("train", overrides, project) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2:] == [str(run_dir / "augment.png"), str(run_dir)]
    grid = torchvision.io.read_image(str(run_dir / "augment.png"))
    assert grid.shape == (3, 822, 822)  # 8 rows (4 before, 4 after) of 8 images, each enlarged to 96 px + padding
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "summary.json").exists()
    assert main_in_process("train", [*TINY, "+show=nothing", f"hydra.run.dir={project / 'no'}"], project) == 2

    # An image folder lists its classes one after another: 40 red images, then 40 green, then 40 blue. The grid's
    # originals (rows 0, 2, 4, 6) take the classes in turn, not the first 32 images, which are all red.
    colors = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    for c, color in enumerate(colors):
        for i in range(40):
            write(project / "pngs" / "train" / f"class{c}" / f"{i:02d}.png", np.full((32, 32, 3), color, np.uint8))
    run_dir = project / "show_folder"
    folder = [o for o in TINY if not o.startswith("data")] + ["data=image_folder", f"data.root={project / 'pngs'}"]
    assert (
        main_in_process("train", [*folder, "augment=none", "+show=augment", f"hydra.run.dir={run_dir}"], project) == 0
    )
    grid = torchvision.io.read_image(str(run_dir / "augment.png"))
    pitch = 96 + 6  # each 32-px image enlarged 3x, 6 px apart
    centres = [tuple(grid[:, 6 + r * pitch + 48, 6 + c * pitch + 48].tolist()) for r in (0, 2, 4, 6) for c in range(8)]
    assert centres[:3] == colors and [centres.count(color) for color in colors] == [11, 11, 10]


def test_adding_an_augmentation_as_the_readme_says(tmp_path, monkeypatch, project):
    """extending.md's "Add an augmentation", word for word: its class as a file of brisk.data (in a clone), its YAML as
    conf/augment/blur.yaml on Hydra's search path; `augment=blur` then builds it into the float stage, after the
    standard crop and flip, and a short fit trains through it."""
    import brisk.data

    readme = (Path(__file__).parents[2] / "docs" / "extending.md").read_text().split("**Add an augmentation**", 1)[1]
    op = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    block = re.search(r"```yaml\n(.*?)```", readme, re.S).group(1)
    assert '@AUGMENTS.register("blur", stage="float")' in op and "blur: 1.0" in block
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "blur.py").write_text(op)
    monkeypatch.setattr(brisk.data, "__path__", [*brisk.data.__path__, str(tmp_path / "ops")])
    monkeypatch.delitem(sys.modules, "brisk.data.blur", raising=False)
    (tmp_path / "conf" / "augment").mkdir(parents=True)
    (tmp_path / "conf" / "augment" / "blur.yaml").write_text(block)
    short = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "callbacks=none"]
    cfg = compose_cfg([*TINY, *short, f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "augment=blur"], project)
    trainer, datamodule, model = build(cfg)
    assert [type(op).__name__ for op in datamodule.augmentation.ops] == ["CropFlip", "Blur"]
    trainer.fit(model, datamodule=datamodule)
    assert trainer.global_step == 2


def test_an_unknown_op_is_refused_with_the_registered_ones(brisk_root):
    cfg = compose_cfg([*TINY, "+data.augment.blurr=1.0"], brisk_root)
    with pytest.raises(BriskError, match=r"data.augment.blurr: no augmentation is registered .* color_jitter"):
        checks.validate(cfg)
