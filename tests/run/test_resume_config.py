"""A resume is compared with its run's saved config before anything is built or trained: what the checkpoint cannot
continue is refused in one line; a finished run is left exactly as it was. Short runs cannot crash a schedule."""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from brisk.errors import BriskError
from brisk.optim import schedules
from brisk.utils.config import plain
from helpers import FINISHED, compose_cfg, main_in_process, read_summary

REFUSED = {
    # overrides on top of the finished run's: what the one error line must say
    "wider_net": (["model.net.width=16"], "model.net: {'type': 'simple_cnn', "),
    "other_model": (["model=resnet18"], "a checkpoint resumes only the model it trained"),
    "more_epochs_with_onecycle": (["trainer.max_epochs=2"], "trainer.max_epochs: 1 -> 2"),
    "smaller_batch": (["data.batch_size=50"], "data.batch_size: 100 -> 50"),
    "larger_batch": (["data.batch_size=200"], "data.batch_size: 100 -> 200"),
    "accumulation": (["accumulation=2"], "trainer.accumulate_grad_batches: 1 -> 2"),
    "other_optimizer": (["optimizer=adamw"], "optimizer.type: sgd -> adamw"),
    "other_scheduler": (["scheduler=cosine"], "scheduler.type: onecycle -> cosine"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_a_change_the_checkpoint_cannot_continue_is_refused_up_front(case, finished_run, tmp_path, brisk_root, capsys):
    overrides, says = REFUSED[case]
    ckpt = finished_run / "checkpoints" / "last.ckpt"
    run = tmp_path / "resumed"
    args = [a for a in FINISHED if not (case == "other_model" and a.startswith("model.net."))]  # resnet18 has no width
    status = main_in_process("train", [*args, *overrides, f"ckpt_path={ckpt}", f"hydra.run.dir={run}"], brisk_root)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("brisk: error:")]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert says in lines[0] and f"ckpt_path={ckpt}" in lines[0] and "start a new run" in lines[0]
    assert not (run / "checkpoints").exists() and not (run / "csv").exists()  # refused before anything was built


def test_crafted_hparams_in_a_resumed_checkpoint_are_only_compared(finished_run, tmp_path, brisk_root, capsys):
    # Lightning's fit(ckpt_path=...) never builds from hyperparameters; brisk's check reads them as data.
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    run = tmp_path / "run"
    shutil.copytree(finished_run / ".hydra", run / ".hydra")
    real = torch.load(finished_run / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    crafted = {"_target_": "builtins.open", "_args_": [str(victim), "w"]}
    torch.save({**real, "hyper_parameters": {**real["hyper_parameters"], "net": crafted}}, ckpt)
    status = main_in_process("train", [*FINISHED, "trainer.max_epochs=2", f"ckpt_path={ckpt}"], brisk_root)
    assert status == 2 and "a checkpoint resumes only the model it trained" in capsys.readouterr().err
    assert victim.read_text() == "keep me"


def test_an_epoch_schedule_resumes_for_more_epochs_and_says_what_changed(finished_run, tmp_path, brisk_root, caplog):
    run = tmp_path / "run"  # the same run, saved with an epoch-based schedule
    shutil.copytree(finished_run / "checkpoints", run / "checkpoints")
    shutil.copytree(finished_run / ".hydra", run / ".hydra")
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")
    saved.scheduler = compose_cfg(["scheduler=step"], run).scheduler  # as a run records it
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")
    last = run / "checkpoints" / "last.ckpt"
    cfg = compose_cfg(
        [*FINISHED, "scheduler=step", "trainer.max_epochs=3", "data.batch_size=50", f"ckpt_path={last}"], brisk_root
    )
    from brisk.run import resume

    assert resume.resolve(cfg, tmp_path / "new").finished is None
    assert "trainer.max_epochs: 1 -> 3" in caplog.text and "data.batch_size: 100 -> 50" in caplog.text


def _with_step_schedule(finished_run: Path, run: Path) -> None:
    """A copy of the finished run, saved with an epoch-based schedule, so it can be resumed for more epochs."""
    shutil.copytree(finished_run / "checkpoints", run / "checkpoints")
    shutil.copytree(finished_run / ".hydra", run / ".hydra")
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")
    saved.scheduler = compose_cfg(["scheduler=step"], run).scheduler  # as a run records it
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")


@pytest.mark.slow  # a real epoch in bf16-true (~14 s); the warning itself is checked in process below
def test_a_resume_may_move_to_another_precision_and_says_so(finished_run, tmp_path, brisk_root):
    """A real resume into bf16-true (16-bit weights and optimizer state) trains on and names the change."""
    run = tmp_path / "run"
    _with_step_schedule(finished_run, run)
    before = read_summary(finished_run)["global_step"]
    args = [*FINISHED, "scheduler=step", "trainer.max_epochs=2", "precision=bf16-true", "ckpt_path=last"]
    assert main_in_process("train", [*args, f"hydra.run.dir={run}"], brisk_root) == 0
    assert "trainer.precision: auto -> bf16-true" in (run / "train.log").read_text()  # the run's own log
    summary = read_summary(run)
    assert summary["precision"]["effective"] == "bf16-true" and summary["global_step"] == 2 * before
    assert math.isfinite(summary["metrics"]["test/acc"])


def test_a_resume_onto_other_devices_says_so(finished_run, tmp_path, brisk_root, caplog):
    run = tmp_path / "run"
    _with_step_schedule(finished_run, run)
    overrides = ["scheduler=step", "trainer.max_epochs=2", "strategy=ddp", "trainer.devices=2", "precision=bf16-true"]
    cfg = compose_cfg([*FINISHED, *overrides, "ckpt_path=last"], brisk_root)
    from brisk.run import resume

    assert resume.resolve(cfg, run).finished is None
    assert "trainer.strategy: auto -> ddp" in caplog.text and "trainer.devices: 1 -> 2" in caplog.text
    assert "trainer.precision: auto -> bf16-true" in caplog.text


def test_a_checkpoint_without_its_run_is_still_checked_against_its_model(finished_run, tmp_path, brisk_root):
    ckpt = tmp_path / "moved.ckpt"
    shutil.copy(finished_run / "checkpoints" / "last.ckpt", ckpt)
    cfg = compose_cfg([*FINISHED, "model.net.width=16", f"ckpt_path={ckpt}"], brisk_root)
    from brisk.run import resume

    with pytest.raises(BriskError, match="a checkpoint resumes only the model it trained"):
        resume.resolve(cfg, tmp_path)


def test_resuming_a_finished_run_leaves_it_as_it_was(finished_run, brisk_root, capsys):
    records = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in finished_run.rglob("*") if p.is_file()}
    kept = {p: v for p, v in records.items() if ".hydra" not in p.parts and p.suffix != ".log"}
    status = main_in_process("train", [*FINISHED, "ckpt_path=last", f"hydra.run.dir={finished_run}"], brisk_root)
    out, err = capsys.readouterr()
    assert status == 0 and "already finished" in err and "nothing to do" in err
    assert out.strip().splitlines()[-1] == str(finished_run)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in kept} == kept  # summary.json, checkpoints, csv
    assert not (finished_run / "csv" / "version_1").exists()


def test_onecycle_warms_up_over_two_steps_where_pct_start_gives_one(caplog, tmp_path):
    # 4 optimizer steps x pct_start 0.25 (e.g. 2 ranks, accumulation 4, 2,000 images at batch 100): torch's
    # OneCycleLR divides by zero at a warm-up of one step, so the run warms up over two.
    config = plain(compose_cfg(["scheduler=onecycle", "optimizer.lr=0.1"], tmp_path).scheduler)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with caplog.at_level(logging.INFO, logger="brisk"):
        scheduler, _ = schedules.build(config, optimizer, lambda interval: 4)
    lrs = []
    for _ in range(4):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[1] == pytest.approx(0.1) and lrs[0] < lrs[1] and lrs[1] > lrs[2] > lrs[3] >= 0  # the peak at step 1
    assert "warming up over 2 steps instead (pct_start=0.5)" in caplog.text
    # A 2-step run has no step left to anneal after a 2-step warm-up: an explicit pct_start=0.5 is refused.
    with pytest.raises(BriskError, match=r"scheduler.pct_start=0.5 x 2 optimizer steps"):
        schedules.build({**config, "pct_start": 0.5}, optimizer, lambda interval: 2)
    schedules.build(config, optimizer, lambda interval: 5)  # not changed more than needed


@pytest.mark.parametrize("total", [1, 2, 3, 4])
def test_cosine_handles_runs_shorter_than_its_warmup(total, tmp_path):
    config = plain(compose_cfg(["scheduler=cosine"], tmp_path).scheduler)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    scheduler, _ = schedules.build(config, optimizer, lambda interval: total)
    lrs = []
    for _ in range(total):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert all(math.isfinite(lr) and 0 <= lr <= 0.1 for lr in lrs)
