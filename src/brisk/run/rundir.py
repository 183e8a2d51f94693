"""A run directory's life: locked while a run uses it, recorded in `.hydra/` only once the run starts,
and removed again when the run is refused and this invocation created the directory.

A training run starts at its first optimizer step (brisk.callbacks.RunStart writes the record then), not when
the fit is called: a fit refuses much before it trains (a logger's folder, the schedule's plan, the net's
first forward in the sanity check, a callback's first batch), and each of those writes into the directory
(.hydra/, the loggers' folders, train.log). So whatever refuses the run before its first step, in whichever
order it writes, the directory goes as one (`Run.refused`); one that has stepped keeps it. A directory this
invocation did not create (a resume's run) is never removed, and gets no record before the first step either.
Whether the run started is read from the disk, the record's config.yaml, so it holds where ddp_spawn steps in
other processes.

Hydra creates the directory and, by default, writes `.hydra/` and opens the log file before the task
runs. conf/hydra/default.yaml turns both off (`output_subdir: null`, a delayed log file), so a run refused
before the fit leaves nothing to remove, and a resume refused by a check leaves its target as it was.

A directory that holds another run's files (its record, checkpoints or summary) is refused before anything is
written in it, since a new run there would replace them (`claim`). Only a resume of that run, from a checkpoint
in it, continues there; it keeps the run's record (other tools compare against it) and writes its own beside it,
in `.hydra/resume-N/`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, read_write

from brisk.checkpoints import paths
from brisk.errors import BriskError, refuse
from brisk.run import entry
from brisk.utils.files import creatable, nearest_existing, write_text
from brisk.utils.ranks import ENV as ELASTIC_RANK
from brisk.utils.ranks import first_process

RECORD = ".hydra"
# What a run leaves in its directory that a new run would replace: its record, its checkpoints (SLURM's requeue
# ones too) and its summary. Anything else (an empty folder, unrelated files) takes a run: brisk's names do not
# collide with it.
RUN_FILES = (f"{RECORD}/config.yaml", f"{paths.FOLDER}/*.ckpt", f"{paths.HPC}*.ckpt", "summary.json")
# Run directory -> its nearest folder that existed before Hydra created it. The one thing handed from
# RunDirCallback to the task's Run: Hydra builds its callbacks itself and passes the task only the config.
_existed: dict[str, Path] = {}


def _given(value: Any, key: str) -> None:
    if value is None or not str(value).strip():
        raise BriskError(
            f"{key} is empty, which would write the run into the current folder. Leave {key} out for a new "
            f"folder under logs/, or name one: {key}=<folder>."
        )


class RunDirCallback(Callback):
    """Checks the run or sweep directory before Hydra creates it: Hydra's own failure is a traceback. Hydra turns
    what a callback raises into a warning and goes on, so a refusal here prints its line and exits itself."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _paths_given(config, "hydra.run.dir")
        path = _checked(config.hydra.run, "hydra.run.dir")
        _existed[str(path)] = nearest_existing(path)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _paths_given(config, "hydra.sweep.dir")
        _checked(config.hydra.sweep, "hydra.sweep.dir")
        if not config.hydra.launcher.get("_target_", "").endswith(".BasicLauncher"):  # jobs run in other processes
            from brisk.run import jobs  # a sweep in a launcher's processes: a single run needs none of it

            jobs.stop_jobs_on_signal()


def _paths_given(config: DictConfig, run_key: str) -> None:
    """paths.root_dir or paths.log_dir from the command line, checked under its own key where the run directory is
    below it (no `run_key` given): a refusal naming hydra.run.dir would point at a key the user did not set."""
    # as typed: an override holding ${...} is the task's to resolve, or to refuse naming its key
    given = {str(o).partition("=")[0].lstrip("+") for o in OmegaConf.to_container(config.hydra.overrides.task)}
    for key in ("paths.root_dir", "paths.log_dir"):
        if key in given and run_key not in given:
            with _refusing():
                creatable(Path(str(OmegaConf.select(config, key))).absolute(), key)


def _checked(node: DictConfig, key: str) -> Path:
    """`node.dir` (hydra.run or hydra.sweep), made absolute in the config and checked writable; refused in one line.
    Resolved once here (${brisk_run_id:}), so the directory checked is the one Hydra creates."""
    with _refusing():
        _given(node.dir, key)
        with read_write(node):
            node.dir = str(Path(str(node.dir)).absolute())
        creatable(Path(node.dir), key)
    return Path(node.dir)


@contextlib.contextmanager
def _refusing() -> Iterator[None]:
    try:
        yield
    except Exception as e:  # a BriskError, or a ${...} in the directory's name that cannot be resolved
        from brisk.utils.explain import explain  # only once something went wrong

        if (error := explain(e)) is None:
            raise
        refuse(error)


def claim(run_dir: Path, resumes: Path | None, multirun: bool = False) -> None:
    """Refuse (BriskError naming the folder) a run directory that holds another run's files, unless this run resumes
    that run: `resumes` is the run directory of the checkpoint it resumes from; `multirun`: a job of a sweep. Nothing
    is written before this."""
    if not first_process():  # a DDP job's other ranks start after the first one has claimed and recorded it
        return
    run_dir = Path(run_dir).absolute()
    if resumes is not None and Path(resumes).absolute() == run_dir:
        return
    if _requeued(run_dir):
        return
    held = sorted({str(p.relative_to(run_dir)) for pattern in RUN_FILES for p in run_dir.glob(pattern)})
    if not held:
        return
    shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
    fix = (
        "Give every job its own folder: leave hydra.sweep.subdir out (one per job number), or make it name each "
        "swept value."
        if multirun
        else "Leave hydra.run.dir out for a new folder, or name an empty one. To train that run on, resume it from "
        f"its own checkpoint with its own config: ckpt_path=last hydra.run.dir={run_dir}."
    )
    raise BriskError(f"{run_dir} holds another run's files ({shown}), which this run would replace. {fix}")


def _requeued(run_dir: Path) -> bool:
    """A requeued SLURM job gets its own directory back, named by its job id (brisk.run.entry.run_id), checkpoint or
    not: a job preempted before its first checkpoint starts over there."""
    return "SLURM_JOB_ID" in os.environ and run_dir.name == entry.run_id()


@dataclass(frozen=True)
class Job:
    """What a run's steps need from Hydra, read once where the command starts (brisk.cli): plain data, so no step
    below reads Hydra's global state, and a caller without a Hydra app around it can give its own."""

    dir: Path  # the run directory
    overrides: tuple[str, ...] = ()  # this job's own, as given (summary.json)
    multirun: bool = False  # a job of a sweep

    @staticmethod
    def of_hydra() -> Job | None:
        """The current Hydra job's, or None outside one."""
        if not HydraConfig.initialized():
            return None
        hydra = HydraConfig.get()
        overrides = tuple(OmegaConf.to_container(hydra.overrides.task))  # as typed: a ${...} in one is text here
        return Job(Path(hydra.runtime.output_dir), overrides, hydra.mode == RunMode.MULTIRUN)


@dataclass(frozen=True)
class Record:
    """A run's record, composed and ready to write: its folder and each file's text. Plain data, so it travels
    to ddp_spawn's processes (in RunStart), where no Hydra config exists to compose it from."""

    folder: Path
    files: tuple[tuple[str, str], ...]  # (name, text); config.yaml last: once it is there, the record is whole

    def written(self) -> bool:
        return (self.folder / "config.yaml").is_file()

    def write(self) -> None:
        if not self.written():
            for name, text in self.files:
                write_text(self.folder / name, text)


class Run:
    """This invocation's hold on its run directory (a no-op without a job), and the job's record (`job`)."""

    def __init__(self, job: Job | None = None) -> None:
        self.job = job
        self.dir: Path | None = None
        self.owned = False  # created by this invocation
        self._as_is = False  # a finished run resumed again: nothing is recorded or removed
        self._record: Record | None = None
        self._lock: int | None = None
        if job is None or not first_process():
            return
        self.dir = job.dir
        key = str(self.dir)
        # a sweep's job directories are new unless they hold something already
        self._made_below = (
            _existed.pop(key) if key in _existed else (self.dir.parent, self.dir)[any(self.dir.iterdir())]
        )
        existed = self._made_below == self.dir
        if ELASTIC_RANK in os.environ:  # rank 0 of a DDP job: the job holds the lock (brisk.run.elastic)
            return
        self._lock = os.open(self.dir, os.O_RDONLY)
        try:
            # On the directory itself: creates no file; the kernel drops it when the process dies (even SIGKILL).
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._lock)
            self._lock = None
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise BriskError(
                    f"hydra.run.dir={self.dir} is in use by a running brisk process. Wait for it to finish, "
                    "or give this run its own directory (leave hydra.run.dir out for a new one)."
                ) from None
            logging.getLogger("brisk").warning("cannot lock %s (%s): running unlocked", self.dir, e.strerror)
        self.owned = not existed

    def record(self, cfg: DictConfig) -> Record | None:
        """The record this run writes when it starts, composed once (None where this process records nothing).
        A resume keeps the original and adds its own beside it."""
        if self.dir is None or self._as_is:
            return None
        if self._record is None:
            folder = self.dir / RECORD
            if (folder / "config.yaml").is_file():
                n = 1 + sum(1 for p in folder.glob("resume-*") if p.is_dir())
                folder = folder / f"resume-{n}"
            hydra_cfg = HydraConfig.instance().cfg
            # Resolved: paths such as data.root come from ${oc.env:BRISK_ROOT,.} and the working folder, which
            # eval, predict and export, started elsewhere, would otherwise resolve to another folder.
            # Without `imports`: a run's files never say what to import (brisk.checkpoints.restore refuses the key).
            saved = OmegaConf.to_container(cfg, resolve=True)
            saved.pop("imports", None)
            files = (
                ("hydra.yaml", OmegaConf.to_yaml(hydra_cfg)),
                ("overrides.yaml", OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task)),
                ("config.yaml", OmegaConf.to_yaml(saved)),
            )
            self._record = Record(folder, files)
        return self._record

    def start(self, cfg: DictConfig) -> None:
        """The run really starts: write its record (once). brisk-train's is written by RunStart at the first
        step; the other entry points' when they are done (brisk.cli)."""
        if (record := self.record(cfg)) is not None:
            record.write()

    @property
    def started(self) -> bool:
        """Whether this run's record is on disk (written here, or by a ddp_spawn process), or it is left as is."""
        return self._as_is or (self._record is not None and self._record.written())

    def refused(self) -> None:
        """The run stopped before it started: remove the directory if this invocation made it, whatever wrote
        into it (Hydra, the loggers, the log file, a checkpoint). A directory that was there (a resume's run, a
        folder named by hydra.run.dir) is never removed: it holds files that are not this invocation's."""
        if not self.owned or self.started or self._lock is None:
            return
        _close_log_files_in(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        parent = self.dir.parent
        while parent != self._made_below and parent.is_relative_to(self._made_below):
            with contextlib.suppress(OSError):  # Hydra made it for this run; keep it if anything else is in it
                parent.rmdir()
            parent = parent.parent

    def leave_as_is(self) -> None:
        """A finished run resumed again: nothing runs, so nothing is recorded and its directory stays as it was."""
        self._as_is = True

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the lock
            self._lock = None


def _close_log_files_in(folder: Path) -> None:
    """Detach log handlers writing into `folder`, so nothing re-creates it after it is removed."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        name = getattr(handler, "baseFilename", None)
        if name and Path(name).is_relative_to(folder):
            root.removeHandler(handler)
            handler.close()
