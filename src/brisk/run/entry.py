"""How a job's entry point is started again, and its run id, the same in each of its processes.

A DDP job's ranks (brisk.run.elastic) each run the job's entry point again, with this job's own overrides and in its
run directory, in run mode: not `sys.argv`, which Lightning's own launcher re-runs and which under a Hydra sweep (`-m`)
is the whole sweep, so that every rank would run the sweep again in its own directories (Lightning #11300, hydra
#2070).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from datetime import datetime
from pathlib import Path


def run_id() -> str:
    """The run directory's name, the same on every rank of a job and different for every run.

    - SLURM: `slurm-<job id>[_<array task>]`: a requeued job gets its directory back and resumes there.
    - torchrun: the launcher agent's start time and pid, which all its workers share.
    - otherwise: now, plus this process id, so two runs started in the same second never collide.
    """
    if job := os.environ.get("SLURM_JOB_ID"):
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        return f"slurm-{job}" + (f"_{task}" if task else "")
    if "TORCHELASTIC_RUN_ID" in os.environ:
        agent = os.getppid()
        return f"{datetime.fromtimestamp(_start_time(agent)):%Y-%m-%d_%H-%M-%S}_{agent}"
    return f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{os.getpid()}"


def proc_stat(pid: int) -> list:
    """Fields 3.. of /proc/<pid>/stat (state, ppid, ...; numbers as ints). OSError once the process is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return [int(f) if f.lstrip("-").isdigit() else f for f in fields]


def _start_time(pid: int) -> float:
    """When process `pid` started (Linux /proc), in seconds since the epoch."""
    try:
        stat = Path("/proc/stat").read_text().splitlines()
        boot = next(float(line.split()[1]) for line in stat if line.startswith("btime"))
        return boot + proc_stat(pid)[19] / os.sysconf("SC_CLK_TCK")  # field 22 of stat: starttime in ticks
    except (OSError, StopIteration, IndexError, ValueError):
        return time.time()


def entry_program(module: str) -> list[str]:
    """How a new process starts the entry point in `module`: `-m brisk.train`, or the script's path.

    Called when the entry point is defined, in the process the user started: later, a job may run in a
    launcher's worker (joblib's loky, submitit), where `__main__` is the launcher's own module."""
    if module != "__main__":
        return ["-m", module]
    spec = getattr(sys.modules["__main__"], "__spec__", None)  # `python -m brisk.train`
    return ["-m", spec.name] if spec is not None else [os.path.abspath(sys.argv[0])]


def started_as(program: list[str], task):
    """`task`, recording for the job's ranks how to start its entry point. The record travels with the
    function (in its closure) to whichever process runs the job."""

    user = os.getpid(), proc_stat(os.getpid())[19]  # the process the user started: its id and start time

    @functools.wraps(task)
    def job(*args, **kwargs):
        _record_entry(program)  # a call, not a `global` write: this function may be unpickled by value
        if os.getpid() == user[0]:
            return task(*args, **kwargs)
        from brisk.run import jobs  # only in a launcher's worker: a run in the user's process needs none of it

        with jobs.in_worker(*user):  # joblib's loky, submitit: the job runs in a launcher's process
            return task(*args, **kwargs)

    return job


_entry: list[str] | None = None


def _record_entry(program: list[str]) -> None:
    global _entry
    _entry = program


def rank_args() -> list[str]:
    """The arguments to the Python interpreter that run this job again as a single run in its own directory: its entry
    point, its config and this job's overrides only (no -m, no sweep), in run mode."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    program = _entry or entry_program("__main__")  # no entry point recorded: a script of the user's own
    config_dirs = [s.path for s in hydra.runtime.config_sources if s.provider == "command-line"]
    return [
        *program,
        f"--config-name={hydra.job.config_name}",
        *(f"--config-dir={d}" for d in config_dirs),
        *hydra.overrides.task,
        f'hydra.run.dir="{hydra.runtime.output_dir}"',
    ]
