"""SigtermCheckpoint: SIGTERM (preemption, `scancel`, `kill`, `docker stop`) or SIGINT (Ctrl-C) saves a checkpoint
and fails the job with 143 or 130 (128 + the signal), as if the signal had ended the process.

Lightning catches SIGTERM: it finishes the current batch and raises SIGTERMException, a SystemExit with
status 0. On its own that loses everything since the last checkpoint and tells the scheduler the job
succeeded. Its handler also broadcasts from rank 0 inside the signal handler, which hangs a DDP job for
good when only rank 0 got the signal (`kill <pid>`, `docker stop`): the other ranks take it for their
per-batch broadcast, and from then on the ranks wait in different collectives (seen: rank 0 in the
checkpoint's all_gather, rank 1 in a barrier). Ctrl-C takes Lightning's KeyboardInterrupt
path instead, which may stop in the middle of an optimizer step, saves nothing and exits 1.

So while a Trainer stage runs (Lightning has installed its handlers by then and puts the previous ones back when the
stage ends), brisk's handler takes SIGTERM and SIGINT. It only notes the signal. A single process then stops like
Lightning does for SIGTERM. Under DDP the ranks agree at points every rank reaches together: the end of each
training batch and of each evaluation epoch. On training batches the agreement costs no wait and no device sync:
each batch end starts an asynchronous all-reduce of the noted signal on a CPU (gloo) group and reads the one started
a batch earlier, long finished by then, so every rank stops one batch after the signal, after the same batch. (A
blocking all-reduce + .item() per batch cost 0.6-0.8 ms with 2 CPU ranks, and a device sync per step on GPUs.)
Evaluation batches may differ by one between ranks, so evaluation agrees per epoch.
Every rank then stops after the same batch, and they save one checkpoint together.

SLURM's requeue signal (SIGUSR1, `#SBATCH --signal=SIGUSR1@90`) has the same problem under DDP: Lightning's
handler saves hpc_ckpt_N.ckpt from inside the signal handler, and that save ends in a barrier, so a job whose
ranks did not all get the signal at the same point waits for good (seen with SIGUSR1 to rank 0 of two). Under
DDP brisk notes it too, agrees on it in the same per-batch all-reduce, and then runs Lightning's requeue (save
on every rank, `scontrol requeue` on rank 0) at that batch end; training goes on, as with Lightning's handler,
until SLURM ends the job. A single process keeps Lightning's handler, which is safe there.

Before a stage's first hook (fit's data setup, a checkpoint being restored) Ctrl-C stays Lightning's
KeyboardInterrupt, so a slow setup stops at once: the loop has no state to checkpoint yet, and brisk.cli turns
Lightning's exit 1 into "interrupted" and 130.

What the user does next depends on the command, not on this callback: brisk-train resumes the run from the
checkpoint (`ckpt_path=last`), but a search resumes by running the search again (the interrupted trial is asked
anew), and the speed lab is run again, not resumed. A command whose fit is not resumed from its checkpoint says
so through a callback of its own in the same Trainer: one with an `interrupted_hint` string (brisk.search.report's
TrialReport, the lab's clock). It is read from the Trainer that stops, so it holds wherever that Trainer was built.
The checkpoint is still saved on every rank alike (the save is collective under DDP); only the line differs.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from brisk import compat
from brisk.checkpoints import paths
from brisk.errors import BriskError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
log = logging.getLogger("brisk")


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
    return paths.last(trainer.default_root_dir)


def interrupted_hint(trainer: L.Trainer) -> str | None:
    """What the command running this fit tells its user after a stop signal instead of brisk-train's resume line,
    or None: the first `interrupted_hint` string among the Trainer's callbacks."""
    for cb in trainer.callbacks:
        hint = getattr(cb, "interrupted_hint", None)
        if isinstance(hint, str) and hint:
            return hint
    return None


def _distributed(trainer: L.Trainer) -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and trainer.world_size > 1


class SigtermCheckpoint(L.Callback):
    def __init__(self) -> None:
        self.signum = 0  # the stop signal noted by this process, or agreed by all ranks
        self._trainer: L.Trainer | None = None
        self._group = None  # a CPU process group for the per-batch agreement
        self.requeue = 0  # the requeue signal noted by this process (only taken under DDP with SLURM's requeue)
        self._pending: tuple[torch.Tensor, object] | None = None  # (flags, work) of the last batch's all-reduce

    def setup(self, trainer, pl_module, stage: str) -> None:
        if not _distributed(trainer):
            self.on_train_batch_end = None  # no ranks to agree with: Lightning skips a hook that is not callable
            return
        vars(self).pop("on_train_batch_end", None)
        if self._group is None:  # every rank calls setup: a collective call is safe
            gloo = torch.distributed.get_backend() == "gloo"
            self._group = torch.distributed.group.WORLD if gloo else torch.distributed.new_group(backend="gloo")

    # Take the signals over at the first hook of every stage, after Lightning has registered its handlers.
    def on_sanity_check_start(self, trainer, pl_module) -> None:
        self._take_over(trainer)

    def on_train_start(self, trainer, pl_module) -> None:
        self._take_over(trainer)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._take_over(trainer)

    def on_test_start(self, trainer, pl_module) -> None:
        self._take_over(trainer)

    def _take_over(self, trainer: L.Trainer) -> None:
        self._trainer = trainer
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only; Lightning's own handling stays
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) != self._on_signal:
                signal.signal(signum, self._on_signal)
        env = compat.cluster_environment(trainer)
        slurm_requeue = isinstance(env, SLURMEnvironment) and env.auto_requeue and _distributed(trainer)
        if slurm_requeue and signal.getsignal(env.requeue_signal) != self._on_requeue_signal:
            signal.signal(env.requeue_signal, self._on_requeue_signal)
        if self.signum and not _distributed(trainer):  # noted between two stages
            compat.stop_like_sigterm(trainer)

    def _on_signal(self, signum: int, frame) -> None:
        if self.signum:  # already stopping: a second Ctrl-C
            return
        self.signum = signum
        log.info("%s received: stopping after this batch", signal.Signals(signum).name)
        if self._trainer is not None and not _distributed(self._trainer):
            compat.stop_like_sigterm(self._trainer)

    def _on_requeue_signal(self, signum: int, frame) -> None:
        self.requeue = signum  # done where every rank agrees on it: a training batch's end, the end of training or test

    def _agree(self, trainer: L.Trainer) -> None:
        """Every rank learns the stop and requeue signals any of them got (the largest, should two differ)."""
        if not _distributed(trainer):
            return
        flags = torch.tensor([self.signum, self.requeue])
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX, group=self._group)
        self._act(trainer, *flags.tolist())

    def _act(self, trainer: L.Trainer, stop: int, requeue: int) -> None:
        """What the ranks agreed on, done on every rank at the same point."""
        if requeue:
            self.requeue = 0  # agreed: not to be agreed on again
        if stop:  # Lightning then raises at its next check, on every rank
            self.signum = stop
            compat.stop_like_sigterm(trainer)
        elif requeue:  # every rank is here: the save's barrier meets on all of them
            compat.slurm_requeue(trainer, requeue)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Only under DDP: outside it setup() leaves this hook uncallable.
        agreed = self._collect()
        if agreed[1]:
            self.requeue = 0  # agreed: not sent round again
        flags = torch.tensor([self.signum, self.requeue])
        self._pending = (
            flags,
            torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX, group=self._group, async_op=True),
        )
        self._act(trainer, *agreed)

    def _collect(self) -> tuple[int, int]:
        """The stop and requeue signals the previous batch's all-reduce agreed on (0 for none): it finished long
        ago."""
        if self._pending is None:
            return 0, 0
        (flags, work), self._pending = self._pending, None
        work.wait()
        stop, requeue = flags.tolist()  # a CPU tensor: no device sync
        return stop, requeue

    def on_train_end(self, trainer, pl_module) -> None:
        # Every rank has one all-reduce outstanding: end it before the next collective. A requeue it agreed on, or
        # one noted since, is done now, with every rank here; a stop signal waits for the test's end, as before.
        _, requeue = self._collect()
        self.requeue = max(self.requeue, requeue)
        if _distributed(trainer):
            flag = torch.tensor([self.requeue])
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=self._group)
            self._act(trainer, 0, int(flag.item()))

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            return  # the end of the next training batch decides (after the last epoch, the test's end)
        self._agree(trainer)  # the sanity check, or trainer.validate

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._agree(trainer)
        if trainer.received_sigterm:
            raise SIGTERMException  # Lightning checks no more after the last test batch

    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        name = signal.Signals(self.signum or signal.SIGTERM).name
        exception.code = 128 + (self.signum or signal.SIGTERM)
        hint = interrupted_hint(trainer)  # None: brisk-train's own run, resumed from the checkpoint saved here
        fitting = trainer.state.fn == TrainerFn.FITTING and not (trainer.sanity_checking or trainer.validating)
        if not fitting:
            # Mid-validation the metrics of the epoch are half-accumulated and not checkpointable; the
            # previous checkpoint stays the resume point, so the resumed run still repeats this one exactly.
            what = "during validation or testing"
            self._say(
                trainer,
                name,
                what if hint else f"{what}; no checkpoint written, the last one is the resume point",
                hint,
            )
            return
        path = checkpoint_path(trainer)
        try:
            trainer.save_checkpoint(path, weights_only=False)  # the full state, to resume from
        except BriskError as e:  # e.g. the divergence guard refused to save NaN weights
            self._say(trainer, name, f"and could not save a checkpoint: {e}", hint)
            return
        where = f"at global step {trainer.global_step} (epoch {trainer.current_epoch})"
        if hint:  # saved all the same (the save is collective, and a rank may have no hint), but not resumed from
            self._say(trainer, name, where, hint)
        elif paths.is_hpc(path):
            self._say(trainer, name, f"{where}; saved {path}", "A requeued SLURM job resumes from it by itself.")
        else:
            self._say(trainer, name, f"{where}; saved {path}")

    @staticmethod
    def _say(trainer: L.Trainer, name: str, what: str, resume: str | None = None) -> None:
        resume = resume or (
            f"Resume with the same overrides plus ckpt_path=last hydra.run.dir={trainer.default_root_dir}"
        )
        if trainer.is_global_zero:
            print(f"brisk: interrupted by {name} {what}. {resume}", file=sys.stderr, flush=True)
