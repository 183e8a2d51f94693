"""TrialReport: a trial of brisk's Optuna search reports its metric after every validation, and is pruned.

The trial reaches the training process through Hydra's own job config: brisk's sweeper launches
trial N as job number N, so `hydra.job.num` is the trial number and `hydra.sweeper` says where the
study is and which pruner judges it. That holds in any launcher that runs the job (in-process,
joblib, submitit on other nodes). Only global rank 0 talks to the study; it broadcasts the verdict,
so under DDP every rank stops together instead of waiting for the others in a collective.

A DDP trial's ranks run in run mode, with no sweeper in their Hydra config: the job hands them its trial
as data in `BRISK_TRIAL` (`Trial.env`), with the pruner as a class name of optuna.pruners, never a `_target_`.
A pruned rank 0 writes the verdict to `<run>/ranks/pruned.txt` and the ranks end quietly; the job raises
optuna.TrialPruned from it, so the search records the trial as it records any pruned one (brisk.run.elastic).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from brisk.errors import BriskError
from brisk.registry import CALLBACKS
from brisk.utils import ranks
from brisk.utils.config import plain
from brisk.utils.files import write_text

log = logging.getLogger("brisk")
SWEEPER = "hydra_plugins.brisk_optuna.sweeper.BriskOptunaSweeper"
ENV = "BRISK_TRIAL"  # in an elastic rank's environment: the job's trial, as JSON (`Trial.env`)
PRUNED = "ranks/pruned.txt"  # in the run directory: rank 0 was pruned; the text is the verdict, for the job to say


@dataclass
class Trial:
    number: int
    storage: str
    study_name: str
    pruner: Any
    storage_given: bool = True  # False: hydra.sweeper.storage was null, so the study is in this sweep's folder

    @staticmethod
    def current() -> Trial | None:
        """The trial this process runs, or None: a single run. A rank of a DDP trial has it from the job (`env`)."""
        if not HydraConfig.initialized():
            return None
        hc = HydraConfig.get()
        if hc.mode == RunMode.RUN and ranks.ENV in os.environ and ENV in os.environ:
            return Trial.from_env(os.environ[ENV])
        if hc.mode != RunMode.MULTIRUN or hc.sweeper.get("_target_") != SWEEPER:
            return None
        from brisk.search.storage import url_of

        url = url_of(hc.sweeper.storage, hc.sweep.dir)
        return Trial(hc.job.num, url, hc.sweeper.study_name, plain(hc.sweeper.pruner), hc.sweeper.storage is not None)

    @property
    def elastic(self) -> bool:
        """Run by the ranks of a DDP job, which end it through the job (`PRUNED`)."""
        return ranks.ENV in os.environ and ENV in os.environ

    def env(self) -> str:
        """This trial as the job hands it to its elastic ranks: plain JSON. The pruner goes as a name: one of
        brisk's (median, hyperband, none), or an optuna.pruners class with plain arguments (`_elastic_pruner`);
        anything else is refused here, in the job, naming the key."""
        return json.dumps({**asdict(self), "pruner": _pruner_data(self.pruner)})

    @staticmethod
    def from_env(text: str) -> Trial:
        """The trial the job handed this rank (`env`). Read as data: its pruner is looked up among Optuna's own
        pruner classes by name, and nothing in it is imported or run."""
        try:
            data = json.loads(text)
            trial = Trial(
                int(data["number"]),
                str(data["storage"]),
                str(data["study_name"]),
                _elastic_pruner(data["pruner"]),
                bool(data["storage_given"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise BriskError(f"{ENV} is not a trial that brisk handed this rank ({e}); run the search again.") from None
        return trial

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


def _pruner_data(spec: Any) -> str | dict:
    """plain(hydra.sweeper.pruner) as data for an elastic rank: a brisk name, or {"class": <a class of
    optuna.pruners>, "args": <plain values, or such a dict for a wrapped pruner>}. In the job it is config, never an
    object: Hydra builds the pruner from it in the sweeper's process only. A spec the ranks cannot build from data
    alone is refused, naming the key."""
    from brisk.search import study as studies

    if isinstance(spec, str) and spec in studies.PRUNERS:
        return spec
    if (data := _described(spec)) is not None:
        try:
            _elastic_pruner(data)
            return data
        except (ValueError, TypeError):
            pass
    raise BriskError(
        f"hydra.sweeper.pruner={spec} cannot reach the ranks of a DDP trial, which take the pruner as data "
        "only: use median, hyperband, none, or {_target_:optuna.pruners.<class>} with plain values (numbers, "
        "strings, lists of them, another such pruner) as its arguments.",
        "hydra.sweeper.pruner",
    )


def _described(spec: Any) -> dict | None:
    """{_target_: optuna.pruners.<class>, ...} as {"class", "args"}, a nested one likewise; None for anything else."""
    target = spec.get("_target_") if isinstance(spec, dict) else None
    if not (isinstance(target, str) and target.startswith("optuna.pruners.")):
        return None
    args = {}
    for key, value in spec.items():
        if key != "_target_" and isinstance(value, dict) and (value := _described(value)) is None:
            return None
        args[key] = value
    del args["_target_"]
    return {"class": target.removeprefix("optuna.pruners."), "args": args}


def _elastic_pruner(data: Any, nested: bool = False):
    """The pruner that `_pruner_data` described: a brisk name, or one of the classes optuna.pruners exports, called
    with plain values (and a pruner so described). ValueError for anything else: what is read from the environment
    only picks among these, and nothing else runs."""
    import optuna

    from brisk.search import study as studies

    if not nested and isinstance(data, str) and data in studies.PRUNERS:
        return studies.pruner(data)
    if not (isinstance(data, dict) and set(data) == {"class", "args"} and isinstance(data["args"], dict)):
        raise ValueError(f"pruner {data!r}")
    name, base = data["class"], optuna.pruners.BasePruner
    cls = getattr(optuna.pruners, name) if isinstance(name, str) and name in optuna.pruners.__all__ else None
    if not (isinstance(cls, type) and issubclass(cls, base) and cls is not base):
        raise ValueError(f"pruner {data!r}")
    scalar, args = (type(None), bool, int, float, str), {}
    for key, value in data["args"].items():
        if isinstance(value, dict):
            value = _elastic_pruner(value, nested=True)
        elif not (isinstance(value, scalar) or (isinstance(value, list) and all(isinstance(x, scalar) for x in value))):
            raise ValueError(f"pruner argument {key}={value!r}")
        args[key] = value
    return cls(**args)


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
        verdict = f"pruned at epoch {trainer.current_epoch} ({self.monitor}={float(value):.4f})"
        if self.trial is not None and trainer.is_global_zero:
            prune = self.trial.report(float(value), trainer.current_epoch)
            log.info(
                "trial %d, epoch %d: %s=%.4f reported",
                self.trial.number,
                trainer.current_epoch,
                self.monitor,
                float(value),
            )
            if prune and self.trial.elastic:  # written before the broadcast: no rank ends before the job can know why
                write_text(Path(HydraConfig.get().runtime.output_dir) / PRUNED, verdict)
        if trainer.world_size > 1:
            prune = trainer.strategy.broadcast(prune, src=0)
        if prune:
            if self.trial is not None and self.trial.elastic:
                # A rank runs in run mode, where Hydra would print TrialPruned as a crash on the console: the ranks
                # end as done instead, and the job raises TrialPruned from PRUNED for the search (brisk.run.elastic).
                raise SystemExit(0)
            import optuna

            raise optuna.TrialPruned(verdict)
