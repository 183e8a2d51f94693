"""`ranks=elastic`: a DDP job's ranks started by TorchElastic's agent (brisk.run.ranks). Real processes, real gloo DDP
on the CPU, real signals to the job process the user started."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from background import background_train
from helpers import TINY, processes_of, read_summary, run_cli, run_dir_of

ELASTIC = ["strategy=ddp", "trainer.devices=2", "callbacks.progress_bar=null", "ranks=elastic"]


def _started(proc, run_dir: Path, timeout: float = 120) -> None:
    """Wait for the run's first optimizer step (rank 0 writes the record then)."""
    deadline = time.monotonic() + timeout
    while not (run_dir / ".hydra" / "config.yaml").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.output()[1][-3000:]
        time.sleep(0.05)


def _gone(root: Path, seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while processes_of(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    return processes_of(root)


def test_two_ranks_train_and_report_through_summary_json(project):
    proc = run_cli("train", [*TINY, *ELASTIC, "trainer.max_epochs=1"], project)
    run_dir = run_dir_of(proc)  # rank 0's last line, and nothing after it
    s = read_summary(run_dir)
    assert s["world_size"] == 2 and s["distributed"]["cluster_environment"] == "TorchElasticEnvironment"
    assert isinstance(s["metrics"]["test/acc"], float)
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()
    (rank1,) = run_dir.glob("ranks/*/attempt_0/1/stderr.log")  # the other ranks log to files only
    assert "Initializing distributed: GLOBAL_RANK: 1" in rank1.read_text()


def test_sigterm_to_the_job_stops_every_rank_with_one_checkpoint(project):
    run_dir = project / "run"
    args = [*TINY, *ELASTIC, "trainer.max_epochs=20", f"hydra.run.dir={run_dir}"]
    with background_train(args, project) as proc:
        _started(proc, run_dir)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        out, err = proc.output()
        left = _gone(project)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.count("brisk: interrupted") == 1 and "brisk: interrupted by SIGTERM at global step" in err, err[-3000:]
    assert [p.name for p in (run_dir / "checkpoints").glob("*.ckpt")] == ["last.ckpt"]
    assert "Traceback" not in err
    assert left == [], "a rank outlived the job"


def test_sigkill_of_the_job_takes_the_ranks(project):
    run_dir = project / "run"
    with background_train([*TINY, *ELASTIC, "trainer.max_epochs=20", f"hydra.run.dir={run_dir}"], project) as proc:
        _started(proc, run_dir)
        assert len(processes_of(project)) == 3  # the job and its two ranks
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone(project) == [], "a rank outlived the job (PR_SET_PDEATHSIG)"


def test_a_user_error_in_the_ranks_is_one_line_and_leaves_no_run_directory(project):
    # The job builds no callbacks, so the ranks are the first to refuse the monitor.
    bad = ["callbacks=[default,early_stopping]", "callbacks.early_stopping.monitor=nope", "trainer.max_epochs=1"]
    proc = run_cli("train", [*TINY, *ELASTIC, *bad], project, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("brisk: ")]
    assert lines == [lines[0]] and lines[0].startswith("brisk: error: callbacks.early_stopping.monitor='nope'")
    assert not (project / "logs").exists() or not any((project / "logs").rglob("*")), "a refused run left its folder"
