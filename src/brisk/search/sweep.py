"""sweep_summary.csv: one row per job of a multirun, whatever happened to it.

Hydra's basic sweeper runs every job of a batch even when one fails, then re-raises the first
failure, so the sweep exits non-zero. This callback records each job as it ends, so the table is
complete (and readable mid-sweep) even then, and redraws sweep_plot.png: the optimized metric
against each parameter that differs between jobs.
"""

from __future__ import annotations

import csv
import fcntl
import io
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from brisk import compat
from brisk.search import sweep_plot
from brisk.utils.files import write_text
from brisk.utils.ranks import first_process

FIELDS = ["job", "status", "metric", "value", "run_dir", "overrides", "error"]


def outcome(job_return: JobReturn) -> tuple[str, Any, str]:
    """(status, value, error) of a finished job: completed, failed, or pruned (an Optuna search stopped it)."""
    if job_return.status == JobStatus.COMPLETED:
        return "completed", job_return.return_value, ""
    error = compat.job_error(job_return)
    optuna = sys.modules.get("optuna")  # imported by then if a search pruned the job
    status = "pruned" if optuna is not None and isinstance(error, optuna.TrialPruned) else "failed"
    return status, None, f"{type(error).__name__}: {error}"


class SweepSummary(Callback):
    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        # Where every rank runs the job (one SLURM task per device, torchrun, a node other than 0), only the
        # first process records it.
        if config.hydra.mode != RunMode.MULTIRUN or not first_process():
            return
        status, value, error = outcome(job_return)
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


def append(path: Path, row: dict[str, Any]) -> None:
    """Add a row to the table. Jobs of one sweep may end at the same moment in different processes (joblib,
    submitit), so the read-modify-write holds an exclusive lock on a file beside the table."""
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        rows = list(csv.DictReader(io.StringIO(path.read_text()))) if path.is_file() else []
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows([*rows, row])
        write_text(path, buf.getvalue())  # rewritten whole: never a half-written table
        # Redrawn after every job, not at the end: a sweep with a failed job never reaches on_multirun_end.
        sweep_plot.write([*rows, row], path.with_name("sweep_plot.png"))
