"""brisk-train and brisk-eval end to end on generated data, through their entry points (in this process where no
process of their own is the point)."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import brisk
from brisk.callbacks.startup_clock import process_age
from brisk.models.nets import SimpleCNN
from helpers import TINY, main_in_process, read_summary, run_cli, run_dir_of

SUMMARY_FIELDS = {
    "metrics",
    "images_per_sec",
    "fit_seconds",
    "startup_seconds",
    "precision",
    "world_size",
    "per_device_batch",
    "accumulation",
    "effective_batch",
    "ckpt_path",
    "last_ckpt_path",
    "hardware",
    "run_dir",
}


@pytest.fixture(scope="module")
def trained(tiny_trained):
    return tiny_trained


def test_summary_has_the_fields(trained):
    run_dir, _ = trained
    s = read_summary(run_dir)
    assert set(s) >= SUMMARY_FIELDS
    assert s["world_size"] == 1 and s["per_device_batch"] == 100 and s["effective_batch"] == 100
    assert s["precision"] == {"requested": "auto", "effective": "32-true"}
    assert s["images_per_sec"] > 0 and s["fit_seconds"] > 0
    assert {"test/acc", "val/acc", "val/acc_best", "train/loss", "train/acc"} <= set(s["metrics"])
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert s["last_ckpt_path"] == str(run_dir / "checkpoints" / "last.ckpt") and Path(s["last_ckpt_path"]).is_file()
    assert Path(s["ckpt_path"]).name.startswith("best-")


def test_summary_has_per_class_results_and_the_cost_of_an_image(trained):
    s = read_summary(trained[0])
    names = s["class_names"]
    assert len(names) == 10 and 0 < s["metrics"]["test/top5_acc"] <= 1
    assert s["metrics"]["test/top5_acc"] >= s["metrics"]["test/acc"]
    assert list(s["test_per_class"]) == sorted(names)  # keyed by name (summary.json sorts its keys)
    assert all(set(v) == {"precision", "recall", "f1", "support"} for v in s["test_per_class"].values())
    matrix = s["test_confusion_matrix"]
    assert matrix["class_names"] == names and len(matrix["counts"]) == 10 and {len(r) for r in matrix["counts"]} == {10}
    assert sum(map(sum, matrix["counts"])) == 500  # data.synthetic.n_test
    assert [sum(row) for row in matrix["counts"]] == [s["test_per_class"][n]["support"] for n in names]
    correct = sum(matrix["counts"][i][i] for i in range(10))
    assert correct / 500 == pytest.approx(s["metrics"]["test/acc"], abs=1e-6)
    assert s["params"] == sum(p.numel() for p in SimpleCNN(num_classes=10, width=8).parameters())  # TINY's net
    assert s["flops_per_image"] > 0


def test_startup_clock_counts_from_the_process_start():
    """Before brisk was imported the interpreter had started already; the clock must see that time too."""
    since_import = time.monotonic() - brisk.IMPORTED_AT
    age = process_age()
    assert since_import - 0.02 <= age < since_import + 600
    time.sleep(0.1)
    assert 0.08 <= process_age() - age < 5


def test_startup_clock_sees_the_time_before_brisk_was_imported():
    """In a process that waits 0.5 s before importing brisk, the clock counts that wait (a clock started at
    brisk's import, the fallback without /proc, would not)."""
    script = (
        "import time; time.sleep(0.5); import brisk; from brisk.callbacks.startup_clock import process_age; "
        "print(process_age() - (time.monotonic() - brisk.IMPORTED_AT))"
    )
    before_import = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout)
    assert 0.45 <= before_import < 60


def test_simple_cnn_learns(trained):
    acc = read_summary(trained[0])["metrics"]["test/acc"]
    assert acc > 0.5, f"test accuracy {acc:.3f} after 4 epochs; chance is 0.1"


def test_run_dir_is_the_last_line(trained):
    run_dir, proc = trained
    assert run_dir.is_dir() and run_dir.parent.name == "runs"


def test_checkpoint_hparams_are_plain_and_load_safely(trained):
    ckpt = torch.load(trained[0] / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["net"]["type"] == "simple_cnn"  # a name: no checkpoint names code


def test_eval_reproduces_test_accuracy(trained, brisk_root, tmp_path):
    # brisk-eval in this process, through its Hydra entry point: a process of its own costs ~7 s of importing
    run_dir, _ = trained
    s = read_summary(run_dir)
    data, eval_dir = [o for o in TINY if o.startswith("data")], tmp_path / "eval"
    args = [*data, f"ckpt_path={s['ckpt_path']}", "trainer.accelerator=cpu", f"hydra.run.dir={eval_dir}"]
    assert main_in_process("evaluate", args, brisk_root) == 0
    eval_json = read_summary.__globals__["json"].loads((eval_dir / "eval.json").read_text())
    assert eval_json["metrics"]["test/acc"] == pytest.approx(s["metrics"]["test/acc"], abs=1e-6)
    assert eval_json["metrics"]["test/top5_acc"] == pytest.approx(s["metrics"]["test/top5_acc"], abs=1e-6)
    assert eval_json["test_confusion_matrix"] == s["test_confusion_matrix"]
    assert eval_json["test_per_class"] == {k: pytest.approx(v) for k, v in s["test_per_class"].items()}


@pytest.mark.slow  # suite budget; the default suite covers the same path more cheaply
def test_resume_continues_to_the_next_epoch(brisk_root):
    # No schedule here: OneCycle and cosine fix their horizon, so they cannot be stretched to more epochs.
    args = [*TINY, "scheduler=none"]
    run_dir = run_dir_of(run_cli("train", [*args, "trainer.max_epochs=2"], brisk_root))
    proc = run_cli("train", [*args, "trainer.max_epochs=3", "ckpt_path=last", f"hydra.run.dir={run_dir}"], brisk_root)
    assert run_dir_of(proc) == run_dir
    s = read_summary(run_dir)
    assert s["epochs"] == 3 and s["global_step"] == 3 * 15
    assert "Restoring states from the checkpoint" in proc.stdout + proc.stderr
    epochs = []
    for version in ("version_0", "version_1"):  # the resumed part is logged next to, not over, the first
        with open(run_dir / "csv" / version / "metrics.csv") as f:
            epochs.append(sorted({int(r["epoch"]) for r in csv.DictReader(f) if r.get("val/acc")}))
    assert epochs == [[0, 1], [2]]
