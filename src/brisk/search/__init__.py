"""Hyperparameter search (brisk-train -m hparams_search=optuna), the tune=lr|batch_size finders, sweep plots."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode


class SweepSummary(Callback):
    """Hydra makes this callback for every command, a single run too: the sweep's table, plot and comparison
    (brisk.search.sweep, 134 lines) are imported only by a multirun."""

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:
            from brisk.search import sweep

            sweep.record(config, job_return)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from brisk.search import sweep

        sweep.end(config)
