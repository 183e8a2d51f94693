"""SigtermCheckpoint: SIGTERM (preemption, `scancel`, a time limit) saves a checkpoint and fails the job.

Lightning already catches SIGTERM: it finishes the current batch, agrees across ranks, and raises
SIGTERMException, a SystemExit with status 0. On its own that loses everything since the last
checkpoint and tells the scheduler the job succeeded. This callback writes the checkpoint at that
point and gives the exit status 143 (128 + SIGTERM), as if the signal had ended the process.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from brisk import compat
from brisk.errors import BriskError

EXIT_STATUS = 128 + signal.SIGTERM


def checkpoint_path(trainer: L.Trainer) -> Path:
    """Where the interrupted state goes: where the next run looks for it first."""
    # The environment Lightning's signal connector consults (single-device strategies have none of their own).
    env = compat.cluster_environment(trainer)
    if isinstance(env, SLURMEnvironment) and env.auto_requeue:
        # A requeued SLURM job (ckpt_path unset) resumes from the newest hpc_ckpt_N.ckpt in its run directory.
        return Path(compat.hpc_save_path(trainer))
    # Otherwise last.ckpt of the unmonitored ModelCheckpoint, which `ckpt_path=last` finds.
    for cb in trainer.checkpoint_callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.monitor is None and cb.dirpath:
            return Path(cb.format_checkpoint_name({"epoch": trainer.current_epoch, "step": trainer.global_step}))
    return Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt"


class SigtermCheckpoint(L.Callback):
    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        exception.code = EXIT_STATUS
        fitting = trainer.state.fn == TrainerFn.FITTING and not (trainer.sanity_checking or trainer.validating)
        if not fitting:
            # Mid-validation the metrics of the epoch are half-accumulated and not checkpointable; the
            # previous checkpoint stays the resume point, so the resumed run still repeats this one exactly.
            self._say(trainer, "during validation or testing; no checkpoint written, the last one is the resume point")
            return
        path = checkpoint_path(trainer)
        try:
            trainer.save_checkpoint(path, weights_only=False)  # the full state, to resume from
        except BriskError as e:  # e.g. the divergence guard refused to save NaN weights
            self._say(trainer, f"and could not save a checkpoint: {e}")
            return
        where = f"at global step {trainer.global_step} (epoch {trainer.current_epoch}); saved {path}"
        if path.name.startswith("hpc_ckpt_"):
            self._say(trainer, where, "A requeued SLURM job resumes from it by itself.")
        else:
            self._say(trainer, where)

    @staticmethod
    def _say(trainer: L.Trainer, what: str, resume: str = "") -> None:
        resume = resume or (
            f"Resume with the same overrides plus ckpt_path=last hydra.run.dir={trainer.default_root_dir}"
        )
        if trainer.is_global_zero:
            print(f"brisk: interrupted by SIGTERM {what}. {resume}", file=sys.stderr, flush=True)
