"""Refusals that come late, inside the fit: a run refused before its first optimizer step leaves no run directory,
whatever had written into it by then (.hydra/, the loggers' folders, train.log), and the same holds for each way
to get there (brisk.run.rundir, brisk.callbacks.RunStart). The cases run brisk-train's real entry point in this
process; a run that trains keeps its directory and its record (tests/run/test_resume.py, tests/run/test_signals.py).
"""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from brisk.models.classifier import FIT_METRICS
from helpers import BASE, RUNS, assert_user_error, brisk_train, tree


def _args(*overrides: str, needles: tuple[str, ...]) -> Callable[[Path], tuple[list[str], tuple[str, ...]]]:
    return lambda root: (list(overrides), needles)


def _under_a_file(logger: str) -> Callable[[Path], tuple[list[str], tuple[str, ...]]]:
    """A logger's folder that cannot be made: its parent is a file (root, as these tests run, ignores modes)."""

    def make(root: Path):
        (root / "afile").write_text("")
        return [f"logger={logger}", f"logger.{logger}.save_dir={root / 'afile' / logger}"], (f"logger.{logger}",)

    return make


# Each case: a function of the project root that prepares files and returns (overrides, needles).
CASES = {
    # refused by brisk inside the fit, in configure_optimizers after the loggers have made their folders: BASE's 1500
    # training images at 750 a batch are 2 optimizer steps, and pct_start=0.5 of 2 is a one-step warm-up
    "one_step_warmup": _args(
        "scheduler=onecycle", "scheduler.pct_start=0.5", "data.batch_size=750", needles=("scheduler.pct_start=0.5",)
    ),
    "mixup_alpha_zero": _args("augment=mixup", "data.augment.mixup_alpha=0", needles=("data.augment.mixup_alpha=0",)),
    "lookahead_every_zero": _args(
        "callbacks=lookahead", "callbacks.lookahead.every=0", needles=("callbacks.lookahead.every=0",)
    ),
    "airbench_width_zero": _args("model=airbench", "model.net.widths=[0,64,64]", needles=("model.net.widths",)),
    "csv_folder_unwritable": _under_a_file("csv"),
    "tensorboard_folder_unwritable": _under_a_file("tensorboard"),
    # a folder no file can be made in, even by root, which may write anywhere else
    "csv_folder_in_proc": _args(
        "logger.csv.save_dir=/proc/brisk-csv", needles=("logger.csv.save_dir=/proc/brisk-csv",)
    ),
    "wandb_without_a_key": _args("logger=wandb", needles=("logger.wandb", "WANDB_MODE=offline")),
    "patience_a_string": _args(
        "callbacks=early_stopping",
        "callbacks.early_stopping.patience=five",
        needles=("callbacks.early_stopping.patience",),
    ),
    # Lightning's EarlyStopping looks at these only after the first epoch's steps: brisk.run.builder refuses them
    # before the fit; the lookahead's and the warm-up's ranges, their constructors (the warm-up's as it is built with
    # the run's total steps, in configure_optimizers, before the first step)
    "early_stopping_monitor_missing": _args(
        "callbacks=early_stopping", "callbacks.early_stopping.monitor=val/nope", needles=("val/nope",)
    ),
    "early_stopping_without_validation": _args(
        "callbacks=early_stopping", "trainer.limit_val_batches=0", needles=("callbacks.early_stopping",)
    ),
    # found once the splits are read, still before the first step: no image is held out to validate on
    "early_stopping_without_a_validation_split": _args(
        "callbacks=early_stopping", "data.val_size=0", needles=("callbacks.early_stopping", "data.val_size=0")
    ),
    # Lightning's LearningRateMonitor refuses a run without a logger as the fit starts (a traceback, before)
    "lr_monitor_without_a_logger": _args(
        "logger.csv=null", needles=("callbacks.lr_monitor:", "callbacks.lr_monitor=null")
    ),
    "lookahead_decay_nan": _args("callbacks=lookahead", "+callbacks.lookahead.decay=nan", needles=("decay=nan",)),
    "warmup_start_nan": _args("scheduler=warmup_linear", "+scheduler.start=nan", needles=("scheduler.start=nan",)),
    "warmup_longer_than_the_run": _args("scheduler=warmup_linear", "scheduler.warmup=5", needles=("scheduler.warmup",)),
}


def _base(overrides: list[str]) -> list[str]:
    """BASE, less its simple_cnn width where the case picks another net (which has no such key)."""
    other_net = any(o.startswith("model=") for o in overrides)
    return [a for a in BASE if not (other_net and a.startswith("model.net.width="))]


@pytest.fixture
def wandb_without_an_account(tmp_path_factory, monkeypatch):
    """No key, no offline mode, and wandb's folders outside the project and the user's home."""
    home = tmp_path_factory.mktemp("wandb-home")
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "WANDB_SILENT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))  # no ~/.netrc with a key in it
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(home / var.lower()))
    yield
    wandb = pytest.importorskip("wandb")
    wandb.teardown()  # its service process, were one started, would outlive the test


@pytest.mark.parametrize("case", CASES)
def test_a_refusal_before_the_first_step_leaves_no_run(case, project, capsys, monkeypatch, restore_logging, request):
    if case == "wandb_without_a_key":
        pytest.importorskip("wandb")
        request.getfixturevalue("wandb_without_an_account")
    overrides, needles = CASES[case](project)
    before = tree(project)
    try:
        proc = brisk_train([*_base(overrides), *overrides], project, capsys, monkeypatch)
    except Exception as e:  # a bug's traceback: in this process Hydra lets the exception through
        proc = subprocess.CompletedProcess(overrides, 1, "", f"Traceback: {e!r}")
    assert proc.returncode != 0, "not refused"
    assert not (project / RUNS).exists(), f"left behind: {sorted(tree(project / RUNS))}"
    assert tree(project) == before, "a refused run wrote, removed or changed files"
    assert_user_error(proc, *needles)


def test_a_run_refused_after_its_first_step_keeps_its_directory(project, capsys, monkeypatch, restore_logging):
    """The other side of the line: a run that has stepped is refused later (the divergence guard, at the first
    NaN loss it sees) and keeps its directory, with its record, for the user to look into."""
    proc = brisk_train([*BASE, "optimizer.lr=1e30"], project, capsys, monkeypatch)
    assert_user_error(proc, "training diverged")
    (run,) = (project / RUNS).iterdir()
    assert (run / ".hydra" / "config.yaml").is_file()
    assert (run / "train.log").is_file()


def test_early_stopping_may_watch_each_metric_the_classifier_logs(project, capsys, monkeypatch, restore_logging):
    """The other side of the monitor's check: the names it takes (FIT_METRICS) are each logged by a fit, so none it
    accepts fails inside the fit, and a run that stops early on one of them trains."""
    stop = [
        "callbacks=early_stopping",
        "callbacks.early_stopping.monitor=val/loss",
        "callbacks.early_stopping.mode=min",
    ]
    proc = brisk_train([*BASE, *stop], project, capsys, monkeypatch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (project / RUNS).iterdir()
    with open(next(run.glob("csv/version_*/metrics.csv"))) as f:
        columns = next(csv.reader(f))
    assert set(FIT_METRICS) <= set(columns), sorted(columns)
