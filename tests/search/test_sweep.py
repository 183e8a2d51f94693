"""Sweeps: a failing job is recorded, the sweep goes on and ends with the runs compared and the failure named in
one line; runs started together never share a directory."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from brisk.search import sweep_plot
from helpers import TINY, brisk_main, read_summary


# In this process: Hydra's basic launcher runs a sweep's jobs in the process that started it anyway, so a
# subprocess added only its start-up (14.2 s as a subprocess, 8.2 s here, alone).
@pytest.mark.usefixtures("restore_logging")
def test_failed_job_is_recorded_and_the_sweep_goes_on(project, capsys, monkeypatch):
    # val_size=99999 is larger than the train split: that job stops with a BriskError in setup.
    proc = brisk_main(
        "train",
        ["-m", *TINY, "trainer.max_epochs=1", "callbacks.progress_bar=null", "data.val_size=99999,500"],
        project,
        capsys,
        monkeypatch,
    )
    assert proc.returncode == 1, "a sweep with a failed job must exit non-zero"
    (table,) = (project / "logs").rglob("sweep_summary.csv")
    # It ends with one line naming the failed job and its folder, after the table, the sweep folder last on stdout.
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "brisk: error: 1 of 2 sweep jobs failed: job 0 (refused before training: no folder kept). "
        f"Their errors are in {table}."
    )
    out = proc.stdout.strip().splitlines()
    written = [str(table.parent / n) for n in ("comparison.csv", "comparison.md", "comparison.png")]
    assert out[-4:] == [*written, str(table.parent)]
    compared = list(csv.DictReader((table.parent / "comparison.csv").open()))
    assert [r["run"] for r in compared] == ["1"] and compared[0]["data.val_size"] == "500"
    rows = list(csv.DictReader(table.open()))
    assert [r["status"] for r in rows] == ["failed", "completed"]
    assert "data.val_size=99999" in rows[0]["overrides"] and "val_size" in rows[0]["error"]
    assert rows[1]["metric"] == "val/acc_best" and 0 < float(rows[1]["value"]) <= 1
    assert float(rows[1]["value"]) == read_summary(table.parent / "1")["metrics"]["val/acc_best"]
    plot = table.parent / "sweep_plot.png"  # drawn after each job, so a sweep that fails still has it
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.usefixtures("restore_logging")
def test_a_sweep_whose_every_job_is_refused_ends_with_each_refusal_and_one_line_naming_the_jobs(
    project, capsys, monkeypatch
):
    proc = brisk_main("train", ["-m", *TINY, "optimizer.lr=-1,-2"], project, capsys, monkeypatch)
    assert proc.returncode == 1
    (table,) = (project / "logs").rglob("sweep_summary.csv")
    lines = proc.stderr.strip().splitlines()
    # each job's own refusal, then the sweep's line; no comparison is attempted, so none is said to be missing
    assert [line for line in lines if line.startswith("brisk:")] == [
        "brisk: error: optimizer.lr=-1 must be a positive number, e.g. optimizer.lr=0.05.",
        "brisk: error: optimizer.lr=-2 must be a positive number, e.g. optimizer.lr=0.05.",
        "brisk: error: 2 of 2 sweep jobs failed: job 0, job 1 (refused before training: no folder kept). "
        f"Their errors are in {table}.",
    ], proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(table.parent)  # the sweep folder, last, as for every sweep
    assert not [p for p in table.parent.iterdir() if p.is_dir()], "a refused job left its folder"


def test_sweep_plot_draws_the_metric_against_each_parameter_that_differs(tmp_path):
    rows = [
        {
            "status": "completed",
            "value": "0.5",
            "metric": "val/acc_best",
            "overrides": "data=synthetic optimizer.lr=0.01",
        },
        {
            "status": "completed",
            "value": "0.6",
            "metric": "val/acc_best",
            "overrides": "data=synthetic optimizer.lr=0.1",
        },
        {"status": "failed", "value": "", "metric": "val/acc_best", "overrides": "data=synthetic optimizer.lr=9"},
    ]
    assert sweep_plot.swept(rows) == {"optimizer.lr": ["0.01", "0.1", "9"]}
    sweep_plot.write(rows, tmp_path / "sweep_plot.png")
    assert (tmp_path / "sweep_plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_started_in_the_same_second_get_different_directories(project):
    cmd = [sys.executable, "-m", "brisk.train", *TINY, "debug=fdr", "callbacks.progress_bar=null"]
    env = {"BRISK_ROOT": str(project), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    dirs = [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert dirs[0] != dirs[1]
    assert len(list((project / "logs" / "train" / "runs").iterdir())) == 2


def _write_rows(sweep_dir: str, writer: int, n: int, start) -> None:
    """One sweep job's process: `n` jobs ending, each recorded by the real callback."""
    from hydra.core.utils import JobReturn, JobStatus
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from brisk.search import SweepSummary

    start.wait()  # every writer starts at once
    for i in range(n):
        job = writer * n + i
        hydra = {"mode": RunMode.MULTIRUN, "job": {"num": job}, "runtime": {"output_dir": f"{sweep_dir}/{job}"}}
        config = OmegaConf.create({"hydra": {**hydra, "sweep": {"dir": sweep_dir}}, "optimized_metric": "val/acc"})
        done = JobReturn(overrides=[f"seed={job}"], status=JobStatus.COMPLETED, _return_value=job / 100)
        SweepSummary().on_job_end(config, done)


def test_jobs_ending_at_once_in_parallel_processes_all_get_their_row(tmp_path):
    # Without the lock, writers that read the table at the same time each write back their own version,
    # so rows are lost, and a writer fails when another has already renamed the shared temporary file.
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    writers, per_writer = 4, 25
    start = ctx.Barrier(writers)
    procs = [ctx.Process(target=_write_rows, args=(str(tmp_path), w, per_writer, start)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * writers
    rows = list(csv.DictReader((tmp_path / "sweep_summary.csv").open()))
    assert sorted(int(r["job"]) for r in rows) == list(range(writers * per_writer))
    assert all(float(r["value"]) == int(r["job"]) / 100 for r in rows)
