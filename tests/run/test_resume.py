"""A run stopped partway (SIGKILL, SIGTERM, SLURM requeue) and resumed ends bitwise equal to the run left alone.

CPU with trainer.deterministic=true. The comparison covers the final weights, every final metric in
summary.json and each epoch's validation metrics. Without brisk's RNG restore, or without its fix for
the loader position, these runs differ.
"""

from __future__ import annotations

import csv
import logging
import os
import signal
import stat
import time
from pathlib import Path

import pytest
import torch

from background import background_train, checkpoint_step, stop, wait_for_step
from brisk.data.loader import TensorBatchLoader
from helpers import SLURM_ENV, TINY, main_in_process, read_summary, run_cli

# Smaller than TINY, to keep 2 cores' time down: 8 steps per epoch (1200 - 400 images, batches of 100).
ARGS = [
    *TINY,
    "data.synthetic.n_train=1200",
    "data.val_size=400",
    "trainer.deterministic=true",
    "trainer.max_epochs=3",
    "callbacks.progress_bar=null",
]
STEPS_PER_EPOCH = 8
# last.ckpt every 4 steps as well as at epoch ends: steps 4, 12, 20 are mid-epoch.
STEP_CHECKPOINTS = "callbacks.last_checkpoint.every_n_train_steps=4"
TIMING = {"train/images_per_sec"}  # the only metric allowed to differ


def train_here(root: Path, args: list[str]) -> None:
    """brisk-train in this process, for the runs nobody signals (the reference, the resumes): what is compared is
    arithmetic, and a process of its own costs ~7 s of importing on 2 cores. The stopped runs stay processes."""
    assert main_in_process("train", args, root) == 0


@pytest.fixture(scope="module")
def reference(brisk_root) -> Path:
    """The run left alone."""
    run_dir = brisk_root / "resume-reference"
    train_here(brisk_root, [*ARGS, f"hydra.run.dir={run_dir}"])
    return run_dir


def _val_history(run_dir: Path) -> dict[int, tuple[str, str]]:
    """epoch -> (val/acc, val/loss) as logged, from every csv version (a resumed run writes the next one)."""
    rows = {}
    for path in sorted((run_dir / "csv").glob("version_*/metrics.csv")):
        with open(path) as f:
            rows |= {int(r["epoch"]): (r["val/acc"], r["val/loss"]) for r in csv.DictReader(f) if r.get("val/acc")}
    return rows


def assert_same_run(run_dir: Path, reference: Path) -> None:
    got, want = read_summary(run_dir), read_summary(reference)
    drop = lambda m: {k: v for k, v in m.items() if k not in TIMING}  # noqa: E731
    assert drop(got["metrics"]) == drop(want["metrics"])
    assert (got["epochs"], got["global_step"]) == (want["epochs"], want["global_step"])
    assert Path(got["ckpt_path"]).name == Path(want["ckpt_path"]).name  # the same epoch was the best
    for name in ("last.ckpt", Path(want["ckpt_path"]).name):
        a, b = (torch.load(d / "checkpoints" / name, weights_only=True)["state_dict"] for d in (run_dir, reference))
        assert a.keys() == b.keys()
        differ = [k for k in a if not torch.equal(a[k], b[k])]
        assert not differ, f"{name}: {len(differ)} tensors differ, e.g. {differ[:3]}"
    history, want_history = _val_history(run_dir), _val_history(reference)
    assert history == want_history


def test_loader_state_resumes_the_epoch_where_it_stopped():
    epoch = 3
    labels = torch.arange(100)

    def loader():
        return TensorBatchLoader(
            torch.zeros(100, 3, 32, 32, dtype=torch.uint8), labels, 10, True, True, seed=7, epoch_fn=lambda: epoch
        )

    whole = [y for _, y in loader()]
    first = loader()
    batches = iter(first)
    seen = [next(batches)[1] for _ in range(4)]
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert [y.tolist() for y in seen + [y for _, y in resumed]] == [y.tolist() for y in whole]
    assert len([y for _, y in resumed]) == len(whole)  # the position applies to one pass only
    other = loader()
    other.load_state_dict({"epoch": epoch - 1, "batches": 4})  # saved in another epoch: not this one's position
    assert len([y for _, y in other]) == len(whole)


def interrupt_and_resume(root: Path, run_dir: Path, extra: list[str], min_step: int, sig: int, caplog=None, env=None):
    """Start a run, stop it with `sig` once last.ckpt reaches `min_step`, resume it with ckpt_path=last: in this
    process given `caplog` (train_here), else as a process of its own (a DDP job's ranks are processes).

    Returns the exit status and stderr of the stopped run and the step it resumed from."""
    args = [*ARGS, *extra, f"hydra.run.dir={run_dir}"]
    last = run_dir / "checkpoints" / "last.ckpt"
    with background_train(args, root, env=env) as proc:
        wait_for_step(proc, last, min_step)
        rc, _, err = stop(proc, sig)
    assert not (run_dir / "summary.json").exists(), "the run finished before it was stopped"
    assert not list(run_dir.glob("checkpoints/.*.tmp*")), "a temporary checkpoint was left behind"
    resumed_from = checkpoint_step(last)
    if caplog is not None:  # in this process, Lightning's line is read as the log record it is
        with caplog.at_level(logging.INFO, logger="lightning.pytorch"):
            train_here(root, [*args, "ckpt_path=last"])
        said = caplog.text
    else:
        proc = run_cli("train", [*args, "ckpt_path=last"], root, env=env)
        said = proc.stdout + proc.stderr
    assert f"Restoring states from the checkpoint path at {last}" in said
    return rc, err, resumed_from


def test_sigkill_resumes_from_the_epoch_checkpoint(reference, brisk_root, tmp_path, caplog):
    # last.ckpt holds the end of epoch 1; the kill lands in epoch 2, which is trained again.
    rc, _, step = interrupt_and_resume(brisk_root, tmp_path / "run", [], 2 * STEPS_PER_EPOCH, signal.SIGKILL, caplog)
    assert rc == -signal.SIGKILL
    assert step == 2 * STEPS_PER_EPOCH
    assert_same_run(tmp_path / "run", reference)


def test_sigkill_resumes_mid_epoch_from_a_step_checkpoint(reference, brisk_root, tmp_path, caplog):
    # The last checkpoint is a mid-epoch one: the resumed epoch must skip exactly the batches already trained.
    run_dir = tmp_path / "run"
    stop_at = STEPS_PER_EPOCH + 1
    rc, _, step = interrupt_and_resume(brisk_root, run_dir, [STEP_CHECKPOINTS], stop_at, signal.SIGKILL, caplog)
    assert rc == -signal.SIGKILL
    assert step % STEPS_PER_EPOCH != 0 and step % 4 == 0, step
    assert_same_run(run_dir, reference)


@pytest.mark.slow  # suite budget; the default suite covers the same path more cheaply
def test_sigterm_saves_exits_non_zero_and_resumes(reference, brisk_root, tmp_path, caplog):
    # Sent right after the step-12 checkpoint, SIGTERM lands mid-epoch 1, 3 steps before its validation.
    # (SIGTERM during validation writes nothing, by design: the last checkpoint stays the resume point.)
    run_dir = tmp_path / "run"
    stop_at = STEPS_PER_EPOCH + 4
    rc, err, step = interrupt_and_resume(brisk_root, run_dir, [STEP_CHECKPOINTS], stop_at, signal.SIGTERM, caplog)
    assert rc == 128 + signal.SIGTERM
    assert step >= STEPS_PER_EPOCH + 4 and step % STEPS_PER_EPOCH != 0, step
    assert f"brisk: interrupted by SIGTERM at global step {step} " in err
    assert "ckpt_path=last hydra.run.dir=" in err
    assert_same_run(run_dir, reference)


@pytest.mark.parametrize(
    ("hook", "epoch", "writes"),
    [
        # in epoch 1's validation: nothing is written, epoch 0's checkpoint stays the resume point
        ("validation_start", 1, False),
        # after epoch 0 ends: Lightning raises there, and brisk saves that state
        pytest.param("train_epoch_end", 0, True, marks=pytest.mark.slow),
    ],
)
def test_sigterm_at_the_edges_of_an_epoch(hook, epoch, writes, reference, brisk_root, tmp_path):
    run_dir = tmp_path / "run"
    signal_at = ["imports=[signal_at]", "+callbacks.sigterm.type=sigterm_at", f"+callbacks.sigterm.hook={hook}"]
    args = [*ARGS, *signal_at, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = run_cli("train", [*args, f"+callbacks.sigterm.epoch={epoch}"], brisk_root, check=False, env=env)
    assert proc.returncode == 128 + signal.SIGTERM
    assert checkpoint_step(run_dir / "checkpoints" / "last.ckpt") == STEPS_PER_EPOCH
    line = next(line for line in proc.stderr.splitlines() if line.startswith("brisk: interrupted by SIGTERM"))
    assert ("no checkpoint written" not in line) == writes
    train_here(brisk_root, [*args, "+callbacks.sigterm.epoch=-1", "ckpt_path=last"])  # left alone
    assert_same_run(run_dir, reference)


@pytest.mark.slow  # suite budget; the default suite covers the same path more cheaply
def test_slurm_sigusr1_requeues_and_the_requeued_job_resumes(reference, brisk_root, tmp_path):
    # SLURM itself cannot run here: its environment variables are set, and `scontrol` is a script that
    # records how it was called. The rest is real: Lightning's SLURM handling, signals, files.
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    job = str(os.getpid() * 1000 + int(time.time()) % 1000)
    env = {**os.environ, **SLURM_ENV, "SLURM_JOB_ID": job, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    # No hydra.run.dir: as in an sbatch script, the job id names the run directory, so the requeued job finds it.
    run_dir = brisk_root / "logs" / "train" / "runs" / f"slurm-{job}"
    with background_train(ARGS, brisk_root, env=env) as proc:
        wait_for_step(proc, run_dir / "checkpoints" / "last.ckpt", STEPS_PER_EPOCH)
        os.kill(proc.pid, signal.SIGUSR1)  # what `#SBATCH --signal=USR1@90` sends before the time limit
        deadline = time.monotonic() + 60
        while not (calls.exists() and (run_dir / "hpc_ckpt_1.ckpt").exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert calls.read_text().split() == ["requeue", job]
        rc, _, err = stop(proc, signal.SIGTERM)  # SLURM ends the job it requeued with SIGTERM
    assert rc == 128 + signal.SIGTERM
    # The SIGTERM checkpoint is the newest hpc checkpoint, so the requeued job resumes from it, not from the
    # one written inside the SIGUSR1 handler at an arbitrary point of a step.
    assert f"saved {run_dir / 'hpc_ckpt_2.ckpt'}" in err
    proc = run_cli("train", ARGS, brisk_root, env=env)  # the requeued job: the same command line
    assert f"Restoring states from the checkpoint path at {run_dir / 'hpc_ckpt_2.ckpt'}" in proc.stdout + proc.stderr
    assert_same_run(run_dir, reference)


@pytest.mark.slow
def test_ddp_ranks_resume_mid_epoch(brisk_root, tmp_path):
    # Two CPU ranks over gloo: every rank's RNG state is gathered into the checkpoint and handed back.
    ddp = ["strategy=ddp", "trainer.devices=2"]
    reference = tmp_path / "reference"
    run_cli("train", [*ARGS, *ddp, f"hydra.run.dir={reference}"], brisk_root)
    run_dir = tmp_path / "run"
    rc, _, step = interrupt_and_resume(
        brisk_root, run_dir, [*ddp, STEP_CHECKPOINTS], STEPS_PER_EPOCH + 1, signal.SIGKILL
    )
    assert rc == -signal.SIGKILL and step % STEPS_PER_EPOCH != 0
    ranks = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["ResumeState"]["ranks"]
    assert len(ranks) == 2
    assert_same_run(run_dir, reference)
