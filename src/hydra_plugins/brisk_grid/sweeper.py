"""The Sweeper class Hydra instantiates for `hydra/sweeper=grid`; the sweep is brisk.search.grid."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class GridSweeper(Sweeper):
    """Hydra's basic sweeper (its keys: max_batch_size, params), run so that a failed job does not end the sweep."""

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None) -> None:
        self.settings = {"max_batch_size": max_batch_size, "params": params}
        self.basic = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from brisk import compat

        self.basic = compat.basic_sweeper(**self.settings)
        self.basic.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        from brisk.search import grid

        return grid.sweep(self.basic, arguments)
