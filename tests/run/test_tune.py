"""tune=lr and tune=batch_size: Lightning's finders print an override line, and refuse DDP up front; brisk reads the
LR finder's curve itself (brisk.search.lr_curve)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest
from lightning.pytorch.tuner.lr_finder import _LRCallback

from brisk.errors import BriskError
from brisk.run.tune import refuse_distributed
from brisk.search import lr_curve
from helpers import TINY, compose_cfg, main_in_process, read_summary, run_cli

PNG = b"\x89PNG\r\n\x1a\n"
QUIET = ["callbacks.progress_bar=null"]


def tune_lr(root, capsys, *overrides) -> tuple[str, dict, Path]:
    """brisk-train tune=lr in this process: the line it prints before the run directory, tune.json, the directory."""
    run_dir = root / "tune"
    capsys.readouterr()
    assert main_in_process("train", [*TINY, *QUIET, "tune=lr", *overrides, f"hydra.run.dir={run_dir}"], root) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == str(run_dir)
    assert (run_dir / "lr_find.png").read_bytes()[:8] == PNG
    assert not (run_dir / "summary.json").exists() and not (run_dir / "checkpoints").exists(), "it trained"
    assert not list(run_dir.glob(".lr_find*.ckpt")), "the finder's temporary checkpoint was left behind"
    return lines[-2], json.loads((run_dir / "tune.json").read_text()), run_dir


def fit(root, name, lr) -> dict:
    run_dir = root / name
    overrides = [*TINY, *QUIET, "trainer.max_epochs=2", f"optimizer.lr={lr}", "seed=0", f"hydra.run.dir={run_dir}"]
    assert main_in_process("train", overrides, root) == 0
    return read_summary(run_dir)["metrics"]


@pytest.mark.slow  # 79 s on 2 busy cores (load 3.5): 55 s the finder's 100 steps, 13-18 s each fit
def test_the_suggested_lr_runs_the_whole_range_and_trains_better_than_a_tenth_of_the_shipped_one(project, capsys):
    # trainer.max_epochs=2 at 15 batches an epoch once cut the 100 steps at 30 ("stopped early ... diverging loss").
    # Measured: optimizer.lr=0.0631 suggested; after 2 epochs train/loss 1.81 and val/acc 0.31 at it, 2.26 and
    # 0.21 at 0.005.
    line, result, run_dir = tune_lr(project, capsys, "trainer.max_epochs=2", "seed=0")
    assert re.fullmatch(r"optimizer\.lr=\d[\d.e+-]*", line), line
    assert result["override"] == line
    curve = result["curve"]
    assert len(curve["lr"]) == 100, "the finder did not run its whole range"
    # The recovered per-step losses start at the loss of an untrained net (Lightning's recorded curve starts at
    # half of it): a check that brisk.search.lr_curve still undoes Lightning's smoothing.
    start = np.median(curve["loss"][:10])
    assert abs(curve["loss"][0] - start) < 0.1 * start, curve["loss"][:10]
    suggested = float(line.partition("=")[2])
    # The shipped optimizer.lr is 0.05 (conf/optimizer/sgd.yaml); Lightning's own suggestion here was 2e-6.
    good, low = fit(project, "at_suggested", suggested), fit(project, "at_a_tenth", 0.005)
    assert good["train/loss"] < low["train/loss"] or good["val/acc"] > low["val/acc"], (suggested, good, low)


def test_a_curve_too_short_to_read_is_said_in_one_line_instead_of_a_value(project, capsys):
    # One epoch of 3 batches: the finder still takes its 10 steps (it once stopped at 3).
    limits = ["trainer.max_epochs=1", "trainer.limit_train_batches=3"]
    line, result, _ = tune_lr(project, capsys, "tune.num_training=10", *limits)
    assert line.startswith("tune=lr suggests no learning rate: the finder recorded 10 losses, too few"), line
    assert result["override"] is None and len(result["curve"]["lr"]) == 10


LRS = np.geomspace(1e-8, 1.0, 100)  # the default range and steps


def curve(noise=0.025, dips=(), fall=(1e-2, 0.3), seed=0) -> np.ndarray:
    """Per-step losses as the finder sees them on CIFAR-like data: flat at 2.4 (noise 0.025, as measured), a fall to
    0.4 between `fall`'s two learning rates, then divergence."""
    rng = np.random.default_rng(seed)
    losses = 2.4 + noise * rng.standard_normal(len(LRS))
    a, b = np.log(fall)
    falling = (np.log(LRS) > a) & (np.log(LRS) <= b)
    losses[falling] -= 2.0 * (np.log(LRS[falling]) - a) / (b - a)
    losses[np.log(LRS) > b] = 0.4 * np.exp(8 * (np.log(LRS[np.log(LRS) > b]) - b))  # blows up past the fall
    for i in dips:
        losses[i] -= 0.5
    return losses


def test_the_suggestion_is_the_steepest_descent_in_the_falling_range_not_a_noise_dip():
    losses = curve(dips=(12, 30, 45))  # single-step dips of 0.5 at lr 3e-8, 1e-6, 1e-5
    found = lr_curve.suggest(LRS, losses)
    assert 1e-2 < found.lr <= 0.3, (found.lr, found.reason)
    # Lightning's rule on the same losses (the steepest gradient past the 10th point) takes a dip.
    gradients = np.gradient(losses[10:-1], LRS[10:-1])
    assert LRS[10 + int(np.argmin(gradients))] < 1e-4


@pytest.mark.parametrize("losses", [curve(fall=(1.0, 1.0)), curve(noise=0.3, fall=(1.0, 1.0), dips=(40, 41))])
def test_a_flat_or_noisy_curve_suggests_nothing(losses):
    found = lr_curve.suggest(LRS, losses)
    assert found.lr is None and "flat or too noisy" in found.reason


def test_unsmooth_undoes_lightnings_recorded_average():
    # Lightning's _LRCallback (lightning 2.6.6): its beta, and the average over losses divided by
    # 1 - beta ** (global_step + 1), global_step counting the step just taken.
    assert inspect.signature(_LRCallback).parameters["beta"].default == lr_curve.BETA
    losses, avg, recorded = curve(), 0.0, []
    for step, loss in enumerate(losses, start=1):
        avg = lr_curve.BETA * avg + (1 - lr_curve.BETA) * loss
        recorded.append(avg / (1 - lr_curve.BETA ** (step + 1)))
    np.testing.assert_allclose(lr_curve.unsmooth(recorded), losses, rtol=1e-9)


@pytest.mark.slow
def test_batch_size_finder_scales_the_global_batch_up_to_the_training_split(project):
    # One epoch of 3 batches of 500 plans OneCycle over 3 steps, and the trials take 15 (3 each at 32 to 256, then 2 and
    # 1): the finder runs without the schedule, which it stepped past its end (a ValueError)
    args = [*TINY, "tune=batch_size", "callbacks.progress_bar=null", "trainer.max_epochs=1", "data.batch_size=500"]
    proc = run_cli("train", args, project)
    line = proc.stdout.strip().splitlines()[-2]
    size = int(line.removeprefix("data.batch_size="))
    # Doubling from tune.init_val=32 over the 1500 training images of TINY: 1024 is the largest that fills a batch.
    assert size == 1024, line
    assert "Batch size 512 succeeded, trying batch size 1024" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "overrides",
    [["strategy=ddp", "trainer.devices=2"], ["trainer.devices=1", "trainer.num_nodes=2"], ["strategy=ddp_spawn"]],
)
def test_tuning_refuses_more_than_one_process(tmp_path, overrides):
    cfg = compose_cfg([*TINY, "tune=lr", *overrides], tmp_path)
    with pytest.raises(BriskError, match=r"tune=lr runs in one process.*trainer.devices=1"):
        refuse_distributed(cfg)
    refuse_distributed(compose_cfg([*TINY, "tune=batch_size"], tmp_path))  # one process: no error
