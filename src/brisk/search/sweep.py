"""sweep_summary.csv: one row per job of a multirun, whatever happened to it; and the end of every sweep.

Each job is recorded as it ends, so the table is complete (and readable mid-sweep) even when jobs fail, and
sweep_plot.png (the optimized metric against each parameter that differs between jobs) is redrawn. When the
sweep ends (Hydra's on_multirun_end), the runs' comparison is written (brisk.search.comparison) and the sweep
folder is the last line printed. brisk's grid sweeper (brisk.search.grid) runs every job even when one fails;
such a sweep then ends with one line naming the failed jobs, and exit status 1.

Hydra makes its callback (brisk.search.SweepSummary) for every command, a single run too, so this module is
imported only by a multirun.
"""

from __future__ import annotations

import csv
import fcntl
import io
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig

from brisk import compat
from brisk.errors import BriskError
from brisk.utils.files import write_text
from brisk.utils.ranks import first_process

log = logging.getLogger("brisk")
FIELDS = ["job", "status", "metric", "value", "run_dir", "overrides", "error"]


def outcome(job_return: JobReturn) -> tuple[str, Any, str]:
    """(status, value, error) of a finished job: completed, failed, or pruned (an Optuna search stopped it)."""
    if job_return.status == JobStatus.COMPLETED:
        return "completed", job_return.return_value, ""
    error = compat.job_error(job_return)
    optuna = sys.modules.get("optuna")  # imported by then if a search pruned the job
    status = "pruned" if optuna is not None and isinstance(error, optuna.TrialPruned) else "failed"
    return status, None, f"{type(error).__name__}: {error}"


def record(config: DictConfig, job_return: JobReturn) -> None:
    """A multirun job ended: its row in sweep_summary.csv."""
    # Where every rank runs the job (one SLURM task per device, torchrun, a node other than 0), only the first
    # process records it.
    if not first_process():
        return
    status, value, error = outcome(job_return)
    if status == "failed" and not isinstance(compat.job_error(job_return), BriskError):
        # A bug: its traceback is the report (a BriskError has printed its one line already). Hydra keeps the
        # exception in the JobReturn without printing it.
        traceback.print_exception(compat.job_error(job_return), file=sys.stderr)
    row = {
        "job": config.hydra.job.num,
        "status": status,
        "metric": config.get("optimized_metric"),
        "value": "" if value is None else value,
        "run_dir": config.hydra.runtime.output_dir,
        "overrides": " ".join(job_return.overrides or []),
        "error": error,
    }
    append(Path(config.hydra.sweep.dir) / "sweep_summary.csv", row)


def end(config: DictConfig) -> None:
    """The multirun ended (Hydra's on_multirun_end)."""
    if first_process():
        from brisk.search import results

        sweep_dir, searched = Path(config.hydra.sweep.dir), _searched(config)
        # A search compares every trial of its study: a resumed one's earlier trials ran in earlier sweep folders.
        conclude(sweep_dir, exit_on_failure=not searched, runs=results.run_dirs(sweep_dir) if searched else None)


def conclude(sweep_dir: Path, exit_on_failure: bool = True, runs: list[Path] | None = None) -> None:
    """The end of a sweep: its runs' comparison (`runs`, else every run below the sweep folder), the sweep folder
    printed last; then, if jobs failed, one line on stderr naming them and their folders, and exit status 1. Hydra
    turns what a callback raises into a warning, so this prints and exits itself."""
    from brisk.search import comparison

    table = sweep_dir / "sweep_summary.csv"
    rows = list(csv.DictReader(io.StringIO(table.read_text()))) if table.is_file() else []
    failed = [r for r in rows if r["status"] == "failed"]
    # Nothing to compare, and the line below says why; a search compares its study's earlier trials too.
    if exit_on_failure and rows and len(failed) == len(rows):
        print(sweep_dir, flush=True)
    else:
        try:
            comparison.publish(sweep_dir, runs)
        except BriskError as e:  # no job finished: nothing to compare
            print(f"brisk: no comparison: {e}", file=sys.stderr, flush=True)
            print(sweep_dir, flush=True)
    if failed and exit_on_failure:
        # A job refused before it trained leaves no folder behind (brisk.run.rundir): those are named together.
        kept = [f"job {r['job']} ({r['run_dir']})" for r in failed if Path(r["run_dir"]).is_dir()]
        refused = [f"job {r['job']}" for r in failed if not Path(r["run_dir"]).is_dir()]
        jobs = [*kept, *([f"{', '.join(refused)} (refused before training: no folder kept)"] if refused else [])]
        print(
            f"brisk: error: {len(failed)} of {len(rows)} sweep jobs failed: {', '.join(jobs)}. "
            f"Their errors are in {table}.",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)


def _searched(config: DictConfig) -> bool:
    """Whether the sweep was brisk's Optuna search, where failed trials are part of searching: it goes on, and
    stops at hydra.sweeper.max_failures with its own error."""
    from brisk.search.report import SWEEPER

    return config.hydra.sweeper.get("_target_") == SWEEPER


def append(path: Path, row: dict[str, Any]) -> None:
    """Add a row to the table. Jobs of one sweep may end at the same moment in different processes (joblib,
    submitit), so the read-modify-write holds an exclusive lock on a file beside the table."""
    from brisk.search import sweep_plot
    from brisk.utils.tables import csv_text

    # A link planted at the lock's fixed name must not create or open a file elsewhere: a real lock is never a
    # link, so one there is removed, and O_NOFOLLOW refuses one planted after that.
    lock_path = path.with_name(f".{path.name}.lock")
    if lock_path.is_symlink():
        lock_path.unlink()
    lock_fd = os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with open(lock_fd, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        rows = list(csv.DictReader(io.StringIO(path.read_text()))) if path.is_file() else []
        write_text(path, csv_text([*rows, row], FIELDS))  # rewritten whole: never a half-written table
        # Redrawn after every job, not at the end: the table and plot can be read while the sweep runs.
        sweep_plot.write([*rows, row], path.with_name("sweep_plot.png"))
