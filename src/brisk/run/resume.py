"""A resume, checked before anything is built: the checkpoint is read once and refused if it cannot be continued
(its run's config, brisk.run.resume_config; its weights and optimizer state, brisk.checkpoints.fits), and a
finished run is left alone. A run without a checkpoint imports neither.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig

from brisk.checkpoints import paths
from brisk.checkpoints.io import peek
from brisk.errors import BriskError
from brisk.run import rundir

log = logging.getLogger("brisk")


class Resume(NamedTuple):
    ckpt_path: str | None  # what fit resumes from: the config's, or a requeued SLURM job's last checkpoint
    finished: dict | None  # the summary of the run it resumes, when that run has already finished
    run_dir: Path | None  # the directory of the run it resumes

    def finished_line(self) -> str:
        return (
            f"brisk: {self.run_dir} already finished (epoch {self.finished.get('epochs')}, global step "
            f"{self.finished['global_step']}): nothing to do, its records are left as they were. To train on, raise "
            "trainer.max_epochs (with scheduler=none, step or exp_decay)."
        )


def resolve(cfg: DictConfig, run_dir: Path, multirun: bool = False) -> Resume:
    """What this run resumes, read once: refuse what it cannot continue (BriskError), and find a finished run.
    `multirun`: the run is a job of a sweep."""
    ckpt_path = slurm_resume_path(cfg.get("ckpt_path"), run_dir)
    if str(ckpt_path) == "last":
        last_exists(cfg, run_dir)
    ckpt = paths.resolve(ckpt_path, run_dir)
    found = ckpt is not None and os.path.lexists(ckpt)
    # Before anything is written: a directory of another run is refused unless this resumes that run.
    rundir.claim(run_dir, paths.run_dir_of(ckpt) if found else None, multirun)
    if not found:
        return Resume(ckpt_path, None, None)  # a fresh run, or `hpc`, which Lightning finds itself or ignores
    from brisk.checkpoints import fits  # with their imports: what only a resume needs
    from brisk.run import resume_config

    # A crafted or damaged file is refused here, before anything is built; so is what is not a regular file (a FIFO
    # would hang Lightning's load).
    checkpoint = peek(ckpt)
    fits.resumable(checkpoint, ckpt, ckpt_path)  # the checks below and Lightning's restore read its keys
    changes = resume_config.compare(cfg, ckpt, checkpoint)
    fits.finite(ckpt, checkpoint)
    fits.check(cfg, ckpt, checkpoint)
    if changes:
        log.warning(changes)
    finished = resume_config.finished(cfg, paths.run_dir_of(ckpt), checkpoint)
    return Resume(ckpt_path, finished, paths.run_dir_of(ckpt))


def last_exists(cfg: DictConfig, run_dir: Path) -> None:
    """`ckpt_path=last` resumes from the run directory's last checkpoint: without one, Lightning would
    only warn and train from scratch in a new directory."""
    folders = {run_dir / paths.FOLDER, run_dir}
    for callback in (cfg.get("callbacks") or {}).values():
        if isinstance(callback, DictConfig) and callback.get("dirpath"):
            folders.add(Path(str(callback.dirpath)))
    if not any(paths.lasts(f) for f in folders) and not paths.hpcs(run_dir):
        raise BriskError(
            f"ckpt_path=last: {run_dir} holds no last checkpoint to resume from. Point at the run: "
            "ckpt_path=last hydra.run.dir=<the run directory>, or ckpt_path=<run>/checkpoints/last.ckpt."
        )


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
