"""TrialReport: a trial of brisk's Optuna search reports its metric after every validation, and is pruned.

The trial reaches the training process through Hydra's own job config: brisk's sweeper launches
trial N as job number N, so `hydra.job.num` is the trial number and `hydra.sweeper` says where the
study is and which pruner judges it. That holds in any launcher that runs the job (in-process,
joblib, submitit on other nodes). Only global rank 0 talks to the study; it broadcasts the verdict,
so under DDP every rank stops together instead of waiting for the others in a collective.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from brisk.errors import BriskError
from brisk.registry import CALLBACKS
from brisk.utils.config import plain

log = logging.getLogger("brisk")
SWEEPER = "hydra_plugins.brisk_optuna.sweeper.BriskOptunaSweeper"


@dataclass
class Trial:
    number: int
    storage: str
    study_name: str
    pruner: Any
    storage_given: bool = True  # False: hydra.sweeper.storage was null, so the study is in this sweep's folder

    @staticmethod
    def current() -> Trial | None:
        """The trial this process runs, or None: a single run, or a rank that brisk started in run mode."""
        if not HydraConfig.initialized():
            return None
        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN or hc.sweeper.get("_target_") != SWEEPER:
            return None
        from brisk.search.storage import url_of

        url = url_of(hc.sweeper.storage, hc.sweep.dir)
        return Trial(hc.job.num, url, hc.sweeper.study_name, plain(hc.sweeper.pruner), hc.sweeper.storage is not None)

    def resume_line(self) -> str:
        """What to do after a stop signal in this trial: run the search again, which reopens the study, keeps its
        finished trials and asks this one again (brisk.search.loop); its checkpoint is not resumed from. Without
        hydra.sweeper.storage the same command would start a new study in a new sweep folder, so the line names it."""
        again = (
            "the same command" if self.storage_given else f"the same command plus hydra.sweeper.storage={self.storage}"
        )
        return (
            f"This was trial {self.number} of the search (study {self.study_name} in {self.storage}): resume the "
            f"search by running {again}; its finished trials are kept and trial {self.number}'s parameters are tried "
            "again from the start."
        )

    def report(self, value: float, step: int) -> bool:
        """Record `value` at `step` in the study; True if the pruner says stop."""
        import optuna

        from brisk.search import study as studies
        from brisk.search.storage import open_storage

        storage = open_storage(self.storage)
        study = optuna.load_study(study_name=self.study_name, storage=storage, pruner=studies.pruner(self.pruner))
        study_id = storage.get_study_id_from_name(self.study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, self.number)
        storage.set_trial_intermediate_value(trial_id, step, value)
        return study.pruner.prune(study, storage.get_trial(trial_id))


@CALLBACKS.register("optuna_trial")
class TrialReport(L.Callback):
    """Reports `monitor` at the end of each validation (step = epoch) and raises optuna.TrialPruned when the
    pruner says so. Outside a search it does nothing but join the verdict's broadcast under DDP."""

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        # Read here, in the process that builds the Trainer: ddp_spawn's workers have no Hydra config.
        self.trial = Trial.current()

    @property
    def interrupted_hint(self) -> str | None:
        """Said after a stop signal instead of brisk-train's resume line (brisk.callbacks.sigterm_checkpoint)."""
        return self.trial.resume_line() if self.trial is not None else None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:  # every rank logs the same keys, so every rank stops here together
            logged = ", ".join(sorted(trainer.callback_metrics)) or "none"
            raise BriskError(f"callbacks.optuna_trial.monitor={self.monitor} is not logged (logged: {logged}).")
        prune = False
        if self.trial is not None and trainer.is_global_zero:
            prune = self.trial.report(float(value), trainer.current_epoch)
            log.info(
                "trial %d, epoch %d: %s=%.4f reported",
                self.trial.number,
                trainer.current_epoch,
                self.monitor,
                float(value),
            )
        if trainer.world_size > 1:
            prune = trainer.strategy.broadcast(prune, src=0)
        if prune:
            import optuna

            raise optuna.TrialPruned(f"pruned at epoch {trainer.current_epoch} ({self.monitor}={float(value):.4f})")
