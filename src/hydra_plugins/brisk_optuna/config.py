"""The sweeper's keys (`hydra.sweeper.*`), registered as `hydra/sweeper=brisk_optuna`."""

# No `from __future__ import annotations`: Hydra execs this module before it is in sys.modules, and
# dataclasses then cannot resolve string annotations.
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class BriskOptunaSweeperConf:
    _target_: str = "hydra_plugins.brisk_optuna.sweeper.BriskOptunaSweeper"
    # Trials to finish in the study (complete, pruned or failed), counted across resumes.
    n_trials: int = 20
    # Trials asked at once and launched as one batch through the configured launcher.
    n_jobs: int = 1
    direction: str = "maximize"
    # The same storage and study name resume a search. null: a new SQLite file in the sweep directory.
    storage: Any = None
    study_name: str = "brisk"
    # tpe | random | grid, or a dict with an optuna.samplers `_target_`. Seeded with `seed`.
    sampler: Any = "tpe"
    seed: int = 0
    # median | hyperband | none, or a dict with an optuna.pruners `_target_`.
    pruner: Any = "median"
    # The search stops once this many trials have failed in one run of it.
    max_failures: int = 3
    # key: Hydra sweep syntax, e.g. `optimizer.lr: tag(log, interval(1e-3, 1))`, `data.batch_size: choice(128, 256)`.
    # Sweeps on the command line join these; a plain `key=value` there fixes that key. null: only the command line's.
    params: dict[str, Any] | None = None


ConfigStore.instance().store(group="hydra/sweeper", name="brisk_optuna", node=BriskOptunaSweeperConf, provider="brisk")
