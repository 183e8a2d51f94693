"""The Optuna study behind a search: storage, sampler, pruner, and what a resumed search finds in it.

Both the sweeper and each trial's TrialReport callback open the study through here, from the same
`hydra.sweeper` settings, so they agree on where it is and which pruner judges the trials.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from brisk.errors import BriskError

log = logging.getLogger("brisk")

# Trial user attributes brisk sets: which sweeper process asked the trial, and which trial a retry repeats.
OWNER = "brisk_sweeper"
RETRY_OF = "brisk_retry_of"
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "hyperband", "none")


def storage_url(storage: str | None, sweep_dir: str | Path) -> str:
    """`hydra.sweeper.storage`, or a SQLite file in the sweep directory: pruning needs a storage that the
    trials can reach from their own processes, and an in-memory study cannot be."""
    if storage is None:
        return f"sqlite:///{Path(sweep_dir).resolve() / 'optuna.db'}"
    if not isinstance(storage, str) or "://" not in storage:
        raise BriskError(
            f"hydra.sweeper.storage={storage} is not a database URL. Use e.g. sqlite:///logs/optuna.db, "
            "or a PostgreSQL/MySQL URL that every node can reach."
        )
    return storage


def open_storage(url: str):
    import optuna

    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        # Trials of a parallel search write their reports at the same time: wait for the lock instead of failing.
        return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
    return optuna.storages.RDBStorage(url)


def _from_spec(spec: Any, key: str, base: type, names: tuple[str, ...]):
    if isinstance(spec, base):  # Hydra instantiates a `_target_` given in hydra.sweeper before brisk sees it
        return spec
    if isinstance(spec, DictConfig | dict) and str(spec.get("_target_", "")).startswith("optuna."):
        obj = instantiate(spec)
        if isinstance(obj, base):
            return obj
    raise BriskError(
        f"hydra.sweeper.{key}={OmegaConf.to_container(spec) if isinstance(spec, DictConfig) else spec} is unknown. "
        f"Use one of {', '.join(names)}, or a dict with an optuna.{key}s `_target_`, "
        f"e.g. hydra.sweeper.{key}={{_target_:optuna.{key}s.{base.__name__.replace('Base', '')}}}."
    )


def pruner(spec: Any):
    import optuna

    named = {"median": optuna.pruners.MedianPruner, "hyperband": optuna.pruners.HyperbandPruner}
    if spec in PRUNERS:
        return named[spec]() if spec in named else optuna.pruners.NopPruner()
    return _from_spec(spec, "pruner", optuna.pruners.BasePruner, PRUNERS)


def sampler(spec: Any, seed: int, grid: dict[str, list] | None = None):
    import optuna

    if spec == "tpe":
        # constant_liar: the trials of a batch (n_jobs > 1) are asked before any is told, so each counts the
        # others as running and TPE does not propose the same point n_jobs times.
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    if spec == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec == "grid":

        class Grid(optuna.samplers.GridSampler):
            # Optuna's GridSampler calls study.stop() once the grid is done, which raises outside study.optimize
            # (optuna 5.1); brisk's loop asks `is_exhausted` instead.
            def after_trial(self, study, trial, state, values) -> None:
                pass

        return Grid(grid or {}, seed=seed)
    return _from_spec(spec, "sampler", optuna.samplers.BaseSampler, SAMPLERS)


def create(settings, url: str, grid_space=None):
    """Create the study, or load it when the storage already holds one by that name."""
    import optuna

    if settings.direction not in ("maximize", "minimize"):
        raise BriskError(f"hydra.sweeper.direction={settings.direction} must be maximize or minimize.")
    chosen = sampler(settings.sampler, settings.seed, grid_space() if settings.sampler == "grid" else None)
    try:
        return optuna.create_study(
            storage=open_storage(url),
            study_name=settings.study_name,
            direction=settings.direction,
            sampler=chosen,
            pruner=pruner(settings.pruner),
            load_if_exists=True,
        )
    except ValueError as e:  # e.g. the stored study was created with the other direction
        raise BriskError(f"study {settings.study_name} in {url}: {e}") from None


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive_here(who: str | None) -> bool:
    host, _, pid = (who or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except OSError:
        return False
    return True


def recover(study) -> list[int]:
    """Trials left RUNNING by a killed search: mark each FAIL and enqueue its parameters to be asked again.

    Refuses when the sweeper that asked them is still running on this machine: one search per study.
    Returns the numbers of the trials it failed.
    """
    from optuna.trial import TrialState

    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for trial in running:
        if _alive_here(trial.user_attrs.get(OWNER)):
            raise BriskError(
                f"study {study.study_name} is being searched by process {trial.user_attrs[OWNER]} (trial "
                f"{trial.number} is running). Wait for it or stop it, or use another hydra.sweeper.study_name."
            )
    for trial in running:
        study.tell(trial.number, state=TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})
        log.warning("trial %d was left running by an interrupted search: marked FAIL, asked again", trial.number)
    return [t.number for t in running]


def finished(study) -> int:
    """Trials that count towards n_trials: complete, pruned, or failed, but not those a kill interrupted
    (they are asked again)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}
    ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(t.state in ended and t.number not in retried for t in trials)
