"""The Optuna study behind a search: sampler, pruner, and the study itself.

Both the sweeper and each trial's TrialReport callback build the pruner through here, from the same
`hydra.sweeper` settings, so they agree on which pruner judges the trials.
"""

from __future__ import annotations

from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from brisk.errors import BriskError
from brisk.search import storage as storages
from brisk.search import trials

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "hyperband", "none")
# A class that takes no required arguments, for the fix in the error message.
EXAMPLES = {"sampler": "optuna.samplers.NSGAIISampler", "pruner": "optuna.pruners.SuccessiveHalvingPruner"}


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
        f"e.g. hydra.sweeper.{key}={{_target_:{EXAMPLES[key]}}}."
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
    """Create the study, or load it when the storage already holds one by that name. Every setting is checked
    before the storage is opened, and the storage before anything is written to it."""
    import optuna

    if settings.direction not in ("maximize", "minimize"):
        raise BriskError(
            f"hydra.sweeper.direction={settings.direction} is unknown: use hydra.sweeper.direction=maximize "
            "(for an accuracy) or minimize (for a loss)."
        )
    chosen = sampler(settings.sampler, settings.seed, grid_space() if settings.sampler == "grid" else None)
    judge = pruner(settings.pruner)
    with trials.quiet():
        storage = storages.open_checked(url, trials.HEARTBEAT)
    existed = settings.study_name in optuna.study.get_all_study_names(storage)
    study = optuna.create_study(
        storage=storage,
        study_name=settings.study_name,
        direction=settings.direction,
        sampler=chosen,
        pruner=judge,
        load_if_exists=True,
    )
    stored = study.direction.name.lower()
    if stored != settings.direction:  # Optuna loads a stored study as it is, whatever direction it is given
        raise BriskError(
            f"hydra.sweeper.direction={settings.direction}: study {settings.study_name} in {storages.shown(url)} "
            f"was created to {stored}. Use hydra.sweeper.direction={stored}, or another hydra.sweeper.study_name "
            "for a new study."
        )
    if existed:
        # A seeded sampler starts its draws afresh in every process: a resumed search, or a second one on the same
        # study, would propose the very points the study already holds (TPE's first trials are random draws).
        study.sampler.reseed_rng()
    return study, storage
