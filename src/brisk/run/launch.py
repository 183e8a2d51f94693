"""Launching the ranks of a job so that DDP works the same in single runs, sweeps, torchrun and SLURM.

Lightning's script launcher re-executes `sys.argv` for ranks 1..N-1. Under a Hydra sweep (`-m`)
that argv is the whole sweep, so every child runs the sweep again in its own directories
(Lightning #11300, hydra #2070). It also leaves LOCAL_RANK and friends in the environment, so the
next job of a sweep believes its processes were created externally and waits for ranks that
never come. brisk launches the ranks itself instead: each child gets this job's own overrides
and this job's directory, in run mode, and the environment is restored when the job ends.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from lightning.fabric.plugins.environments.lightning import find_free_network_port
from omegaconf import DictConfig

from brisk.checkpoints import paths
from brisk.run import devices, jobs

log = logging.getLogger("brisk")

# What brisk sets for a job's ranks, and restores afterwards.
_RANK_VARS = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
# After a child rank fails, how long rank 0 may take to fail on its own (recorded by the sweep)
# before it is killed for hanging in a collective.
GRACE_SECONDS = 30


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


def _start_time(pid: int) -> float:
    """When process `pid` started (Linux /proc), in seconds since the epoch."""
    try:
        stat = Path("/proc/stat").read_text().splitlines()
        boot = next(float(line.split()[1]) for line in stat if line.startswith("btime"))
        return boot + jobs.stat(pid)[19] / os.sysconf("SC_CLK_TCK")  # field 22 of stat: starttime in ticks
    except (OSError, StopIteration, IndexError, ValueError):
        return time.time()


def die_with_parent() -> None:
    """This process gets SIGKILL when the thread that started it exits (Linux), instead of running on as an orphan."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _start_child_rank() -> None:
    die_with_parent()  # killed when rank 0 dies, instead of hanging in a collective as an orphan
    # A terminal's Ctrl-C reaches every process of its foreground group. Rank 0 alone acts on it and stops the
    # others (forward_signal, stop); a child rank that took it too would die mid-start with a KeyboardInterrupt,
    # while rank 0 waits for it in the rendezvous, which no Python handler interrupts. An ignored signal stays
    # ignored across exec and Python then installs no KeyboardInterrupt handler; SigtermCheckpoint takes SIGINT
    # again at each Trainer stage, where a copy from the terminal and the one rank 0 forwards count once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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

    user = os.getpid(), jobs.stat(os.getpid())[19]  # the process the user started: its id and start time

    @functools.wraps(task)
    def job(*args, **kwargs):
        _record_entry(program)  # a call, not a `global` write: this function may be unpickled by value
        if os.getpid() == user[0]:
            return task(*args, **kwargs)
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


def _child_command(rank: int) -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return [
        sys.executable,
        *rank_args(),
        f"hydra.job.name={HydraConfig.get().job.name}_rank{rank}",  # its own log file beside rank 0's
        "hydra.job_logging.root.handlers=[file]",  # and only there: the console shows rank 0's lines once
        "hydra.output_subdir=null",  # rank 0 alone writes .hydra/
    ]


class _Ranks:
    """The child ranks of the current job, watched like Lightning's own launcher watches them."""

    def __init__(self, num_processes: int, num_nodes: int) -> None:
        self.saved_env = {k: os.environ.get(k) for k in _RANK_VARS}
        os.environ.update(
            MASTER_ADDR=os.environ.get("MASTER_ADDR", "127.0.0.1"),
            MASTER_PORT=str(find_free_network_port()) if num_nodes == 1 else os.environ["MASTER_PORT"],
            NODE_RANK=os.environ.get("NODE_RANK", "0"),
            WORLD_SIZE=str(num_processes * num_nodes),
            LOCAL_RANK="0",
        )
        self.procs = [
            subprocess.Popen(
                _child_command(rank), env={**os.environ, "LOCAL_RANK": str(rank)}, preexec_fn=_start_child_rank
            )
            for rank in range(1, num_processes)
        ]
        self.signalled = 0  # the stop signal forwarded to the children, whose exit then is no failure
        self.done = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="brisk-rank-watch").start()

    def _watch(self) -> None:
        while not self.done.wait(1.0):
            failed = [p for p in self.procs if p.poll() not in (None, 0, 128 + self.signalled)]
            if failed:
                log.error("rank process %d exited with %d; stopping the job", failed[0].pid, failed[0].returncode)
                self._kill()
                if not self.done.wait(GRACE_SECONDS):
                    log.error("rank 0 is stuck waiting for the dead rank; killing it")
                    os.kill(os.getpid(), signal.SIGKILL)
                return

    def forward(self, signum: int) -> None:
        self.signalled = signum
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signum)

    def _kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()

    def close(self, timeout: float = 60) -> None:
        """Wait for the children (they finish with rank 0), then restore the environment."""
        self.done.set()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("rank process %d did not exit; killing it", p.pid)
        self._kill()
        codes = [p.wait() for p in self.procs]
        if any(codes):  # silent otherwise: a run's last line of output is its directory
            log.info("ranks 1-%d exited with %s", len(self.procs), codes)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # Lightning only tears the process group down at exit; the next job of a sweep needs a new one.
            torch.distributed.destroy_process_group()
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_current: _Ranks | None = None


def on_all_ranks(trainer: DictConfig, make_trainer: Callable[[], L.Trainer]) -> L.Trainer:
    """The Trainer `make_trainer` builds, once, after the job's other ranks on this node are started where it needs
    them (brisk.run.devices.script_processes): brisk starts them itself (see above), and with LOCAL_RANK set
    Lightning sees processes that were created for it."""
    global _current
    if (n := devices.script_processes(trainer)) > 1:
        _current = _Ranks(n, devices.num_nodes(trainer))
    return make_trainer()


def forward_signal(signum: int) -> None:
    """Send a stop signal on to the ranks this process started (none unless it is rank 0 of brisk's own launch):
    a signal sent to rank 0 alone (`kill <pid>`, `docker stop`) reaches the whole job."""
    if _current is not None:
        _current.forward(signum)


def stop() -> None:
    """Kill the ranks this process started at once: rank 0 is stopping outside training, where they can't follow."""
    if _current is not None:
        _current.done.set()  # their exit is no failure to report
        _current._kill()


def finish() -> None:
    """End the current job's ranks (no-op when this process launched none)."""
    global _current
    if _current is not None:
        _current.close()
        _current = None


def slurm_resume_path(ckpt_path: str | None, run_dir: Path) -> str | None:
    """A requeued SLURM job (same job id, so the same run directory) resumes where it stopped.

    Lightning resumes by itself from the hpc_ckpt_N.ckpt it writes on SIGUSR1; after a preemption
    (SIGTERM) there is only last.ckpt, which Lightning would ignore.
    """
    if ckpt_path is not None or "SLURM_JOB_ID" not in os.environ or paths.hpcs(run_dir):
        return ckpt_path
    last = paths.last(run_dir)
    if last.is_file():
        log.info("SLURM job %s restarted: resuming from %s", os.environ["SLURM_JOB_ID"], last)
        return str(last)
    return None


def environment(trainer: L.Trainer) -> dict[str, object]:
    """Which launcher started the ranks, for summary.json."""
    env = getattr(trainer.strategy, "cluster_environment", None)  # single-device strategies have none
    if env is None:
        env = next((c for c in (SLURMEnvironment, TorchElasticEnvironment) if c.detect()), None)
    name = (env.__name__ if isinstance(env, type) else type(env).__name__) if env is not None else None
    return {
        "cluster_environment": name,
        "num_nodes": trainer.num_nodes,
        "devices_per_node": trainer.num_devices,
        "node_rank": trainer.node_rank,
    }
