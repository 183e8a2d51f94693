"""brisk-predict on real PNG files written from the trained TINY run's own test split."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from torchvision.io import write_png

from brisk.checkpoints import restore
from brisk.run.builder import build_datamodule
from helpers import main_in_process, read_summary, run_cli, run_dir_of


@pytest.fixture(scope="module")
def test_pngs(tiny_trained, tmp_path_factory) -> tuple[Path, list[str]]:
    """The run's test split as PNG files (lossless), named <index>_<label>.png, and the run's class names."""
    run_dir, _ = tiny_trained
    data = build_datamodule(OmegaConf.create(restore.run_config(run_dir / "checkpoints" / "last.ckpt")))  # plain data
    data.prepare_data()
    data.setup("test")
    images, labels = data.tensors("test")
    folder = tmp_path_factory.mktemp("test_pngs")
    for i, (image, label) in enumerate(zip(images, labels.tolist(), strict=True)):
        write_png(image, str(folder / f"{i:05d}_{label}.png"))
    return folder, data.class_names


def predict(run_dir: Path, inputs, out: Path, root: Path, *extra: str) -> int:
    ckpt = read_summary(run_dir)["ckpt_path"]  # the checkpoint brisk-train tested
    return main_in_process("predict", [f"ckpt_path={ckpt}", f"inputs={inputs}", f"hydra.run.dir={out}", *extra], root)


def read_rows(out: Path) -> list[dict[str, str]]:
    with (out / "predictions.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_predictions_match_the_runs_test_accuracy(tiny_trained, test_pngs, brisk_root, tmp_path):
    run_dir, _ = tiny_trained
    folder, class_names = test_pngs
    assert predict(run_dir, folder, tmp_path / "out", brisk_root) == 0
    rows = read_rows(tmp_path / "out")
    files = sorted(folder.glob("*.png"))
    assert [row["path"] for row in rows] == [str(p) for p in files]  # every image once, ordered by path
    assert list(rows[0]) == [
        "path",
        "class",
        "probability",
        "top2_class",
        "top2_probability",
        "top3_class",
        "top3_probability",
    ]
    for row in rows:
        probs = [float(row[k]) for k in ("probability", "top2_probability", "top3_probability")]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
        assert {row["class"], row["top2_class"], row["top3_class"]} <= set(class_names)
    labels = [class_names[int(p.stem.split("_")[1])] for p in files]
    acc = sum(row["class"] == label for row, label in zip(rows, labels, strict=True)) / len(rows)
    # PNG is lossless and the images are prepared and normalized as in the test: the same predictions.
    assert acc == pytest.approx(read_summary(run_dir)["metrics"]["test/acc"], abs=1 / len(rows))


def test_a_single_file_and_a_glob(tiny_trained, test_pngs, brisk_root, tmp_path):
    run_dir, _ = tiny_trained
    folder, _ = test_pngs
    one = sorted(folder.glob("00007_*.png"))[0]
    assert predict(run_dir, one, tmp_path / "one", brisk_root, "top_k=1") == 0
    rows = read_rows(tmp_path / "one")
    assert [row["path"] for row in rows] == [str(one)] and list(rows[0]) == ["path", "class", "probability"]
    assert predict(run_dir, f"{folder}/0001*.png", tmp_path / "glob", brisk_root) == 0
    assert [row["path"] for row in read_rows(tmp_path / "glob")] == [str(p) for p in sorted(folder.glob("0001*.png"))]


def test_a_corrupt_file_is_named_in_one_line(tiny_trained, test_pngs, brisk_root, tmp_path, capsys):
    run_dir, _ = tiny_trained
    folder, _ = test_pngs
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "good.png").write_bytes(sorted(folder.glob("*.png"))[0].read_bytes())
    bad = inputs / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    capsys.readouterr()
    assert predict(run_dir, inputs, tmp_path / "out", brisk_root) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("brisk: error:")]
    assert len(errors) == 1 and str(bad) in errors[0]
    assert not (tmp_path / "out" / "predictions.csv").exists()


@pytest.mark.slow
def test_ddp_ranks_write_one_file_in_path_order(tiny_trained, test_pngs, brisk_root, tmp_path):
    """2 gloo ranks, each predicting its share: the merged file equals the one-process file."""
    run_dir, _ = tiny_trained
    folder, _ = test_pngs
    assert predict(run_dir, folder, tmp_path / "one", brisk_root) == 0
    ckpt = read_summary(run_dir)["ckpt_path"]
    ddp = ["strategy=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "batch_size=64"]
    proc = run_cli(
        "predict", [f"ckpt_path={ckpt}", f"inputs={folder}", f"hydra.run.dir={tmp_path / 'two'}", *ddp], brisk_root
    )
    assert run_dir_of(proc) == tmp_path / "two"
    one, two = read_rows(tmp_path / "one"), read_rows(tmp_path / "two")
    assert [(r["path"], r["class"]) for r in two] == [(r["path"], r["class"]) for r in one]
    assert [float(r["probability"]) for r in two] == pytest.approx([float(r["probability"]) for r in one], abs=1e-5)
    # no part files left; TorchElastic's agent started the ranks, and rank 1 logged into the folder
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [".hydra", "predictions.csv", "ranks"]
    (rank1,) = (tmp_path / "two").glob("ranks/*/attempt_0/1/stderr.log")
    assert "GLOBAL_RANK: 1" in rank1.read_text()
