"""DDP jobs under Hydra's launcher plugins, and under SLURM's one-task-per-device layout.

A job's ranks are started from brisk's own entry point (`python -m brisk.train`), whichever process runs
the job: under joblib it is a loky worker and under submitit `submitit.core._submit`, whose `__main__`
would otherwise be started as the rank. Real processes and real gloo DDP; the `project`
fixture checks that none is left.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only as fabric_rank_zero_only
from lightning.pytorch.utilities import rank_zero_only as pytorch_rank_zero_only
from omegaconf import OmegaConf

from background import background_train
from brisk.run import devices
from brisk.run.prepare import build_trainer
from helpers import SLURM_ENV, TINY, compose_cfg, processes_of, read_summary, run_cli

# As little training as DDP needs to show itself: 2 steps, 1 validation and 1 test batch per rank.
CHEAP = [
    *TINY,
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.num_sanity_val_steps=0",
    "scheduler=none",
    "callbacks.progress_bar=null",
]
DDP = ["strategy=ddp", "trainer.devices=2"]
SWEEP = [*CHEAP, *DDP, "optimizer.lr=0.01,0.02"]


def check_sweep(root: Path, jobs: int = 2, rank_logs: bool = True) -> list[dict]:
    """Every job trained with both ranks, in its own directory of the one sweep, and has its row."""
    (table,) = (root / "logs").rglob("sweep_summary.csv")
    rows = sorted(csv.DictReader(table.open()), key=lambda r: int(r["job"]))
    assert [(r["job"], r["status"]) for r in rows] == [(str(j), "completed") for j in range(jobs)], rows
    for row in rows:
        run_dir = Path(row["run_dir"])
        assert run_dir == table.parent / row["job"]
        s = read_summary(run_dir)
        assert s["world_size"] == 2 and s["overrides"] == row["overrides"].split()
        # rank 1's own log file in its job's directory when brisk-train started it (TorchElastic's); none when SLURM did
        rank1 = [*run_dir.glob("ranks/*/attempt_0/1/stderr.log")]
        assert len(rank1) == int(rank_logs), "rank 1 logs in its job's directory, when brisk-train starts it"
    assert not (root / "logs" / "train" / "runs").exists(), "a rank ran as a separate run"
    return rows


@pytest.mark.slow  # 36 s against submitit_local's 28 s on 2 cores: that one stays in the default suite
def test_ddp_sweep_under_joblib_with_two_workers(project):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    run_cli("train", ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *SWEEP], project, timeout=400)
    rows = check_sweep(project)
    assert {r["overrides"].split()[-1] for r in rows} == {"optimizer.lr=0.01", "optimizer.lr=0.02"}


# ~30 s of processes; a DDP sweep under Hydra's own launcher stays in the default suite
# (tests/run/test_distributed.py::test_sweep_runs_each_job_once_with_its_ranks).
@pytest.mark.slow
def test_ddp_sweep_under_submitit_local(project):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    run_cli("train", ["-m", "hydra/launcher=submitit_local", *SWEEP], project, timeout=400)
    check_sweep(project)


def _slurm_task(rank: int, job: str, port: str) -> dict[str, str]:
    """What srun sets for task `rank` of a one-node job with two tasks (one per device)."""
    return {
        **SLURM_ENV,
        "SLURM_JOB_ID": job,
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "MASTER_PORT": port,
    }


def test_slurm_tasks_are_the_ranks_and_brisk_starts_none(project, monkeypatch):
    cfg = compose_cfg([*CHEAP, *DDP], project)
    # Outside SLURM, the same config makes brisk start its 2 ranks ...
    assert devices.script_processes(cfg.trainer) == 2
    # ... under SLURM, each task is a rank already: task 1 of 2 builds its Trainer and launches nothing.
    for key, value in _slurm_task(1, "4243", "29400").items():
        monkeypatch.setenv(key, value)
    for rank_zero_only in {id(f): f for f in (fabric_rank_zero_only, pytorch_rank_zero_only)}.values():
        monkeypatch.setattr(rank_zero_only, "rank", 0)  # a Trainer of rank 1 sets it for the whole test process
    trainer = build_trainer(cfg)
    assert isinstance(trainer.strategy.cluster_environment, SLURMEnvironment)
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank) == (2, 1, 1)
    assert devices.script_processes(cfg.trainer) == 1
    assert processes_of(project) == []


@pytest.mark.slow
def test_two_slurm_tasks_run_a_sweep_job_as_its_two_ranks(project):
    """`srun --ntasks-per-node=2 brisk-train -m ...`, as two processes: each task runs the sweep, together they
    are the job's two ranks; no third process ever appears, and the job gets one row."""
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    job, port = str(os.getpid()), str(find_free_network_port())
    cmd = [sys.executable, "-m", "brisk.train", "-m", *CHEAP, *DDP, "optimizer.lr=0.01"]
    base = {**os.environ, "BRISK_ROOT": str(project), "PYTHONUNBUFFERED": "1"}
    tasks = [
        subprocess.Popen(cmd, cwd=project, env={**base, **_slurm_task(r, job, port)}, stdout=subprocess.DEVNULL)
        for r in (0, 1)
    ]
    most = 0
    try:
        while any(t.poll() is None for t in tasks):
            # brisk's processes only: platform.processor() (summary.json's cpu) runs `uname -p` once per process, a
            # child that the sampling caught once on a loaded machine (one that ended meanwhile resolves to no python)
            most = max(
                most, sum(Path(f"/proc/{pid}/exe").resolve().name.startswith("python") for pid in processes_of(project))
            )
            time.sleep(0.2)
    finally:
        for t in tasks:
            if t.poll() is None:
                t.kill()
    assert [t.wait() for t in tasks] == [0, 0]
    assert most == 2, f"{most} processes: brisk started ranks of its own under SLURM"
    (row,) = check_sweep(project, jobs=1, rank_logs=False)
    assert read_summary(Path(row["run_dir"]))["distributed"]["cluster_environment"] == "SLURMEnvironment"


def test_sigterm_to_a_joblib_sweep_stops_every_worker_job_with_its_checkpoint(project):
    """`kill <pid>` of the sweep the user started: each worker's job stops as a SIGTERM'd run does (one checkpoint,
    its line), the sweep ends 143 once they have, and no worker trains on. Before, the sweep died at once and both
    loky workers kept rewriting their last.ckpt."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2"]
    args = [*sweep, *TINY, "trainer.max_epochs=50", "scheduler=none", "callbacks.progress_bar=null"]
    with background_train(args, project) as proc:
        deadline = time.monotonic() + 120
        while len(ckpts := sorted(project.glob("logs/**/last.ckpt"))) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.output()[1][-3000:]
            time.sleep(0.2)
        assert len(ckpts) == 2, "the jobs never checkpointed"
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
        saved = {c: c.stat().st_mtime_ns for c in ckpts}
        err = proc.output()[1]
        deadline = time.monotonic() + 10
        while processes_of(project) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = processes_of(project)
        time.sleep(3)  # a worker left training rewrites its last.ckpt every epoch (~2 s here)
    assert proc.returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == "brisk: interrupted by SIGTERM; 2 running job(s) of the sweep stopped"
    # Each job's line (a checkpoint, or none mid-validation: the last one is the resume point), then the sweep's.
    assert err.count("brisk: interrupted by SIGTERM") == 3, err[-3000:]
    assert left == [], "a worker outlived the sweep"
    assert {c: c.stat().st_mtime_ns for c in ckpts} == saved, "a worker trained on after the sweep's exit"


@pytest.mark.parametrize("strategy", ["auto", "ddp", "ddp_find_unused_parameters_true", "ddp_spawn", "ddp_fork"])
@pytest.mark.parametrize("n", [1, 2, "auto"])
def test_brisk_counts_the_processes_lightning_would_start_by_running_the_script_again(strategy, n):
    """brisk starts a job's ranks from the config, before it builds the Trainer once; Lightning, given the same
    config, must agree on whether it would run the script again for them (its launcher, by type: no public
    attribute says)."""
    cfg = OmegaConf.create({"accelerator": "cpu", "devices": n, "strategy": strategy})
    trainer = L.Trainer(accelerator="cpu", devices=n, strategy=strategy, logger=False, enable_checkpointing=False)
    launcher = trainer.strategy.launcher
    relaunches = type(launcher).__name__ == "_SubprocessScriptLauncher" and launcher.num_processes > 1
    assert (devices.script_processes(cfg) > 1) == relaunches
    if relaunches:
        assert devices.script_processes(cfg) == launcher.num_processes
