"""The Sweeper class Hydra instantiates; the search loop is brisk.search.loop."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class BriskOptunaSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        from brisk.errors import BriskError, refuse
        from brisk.search.loop import search

        try:
            return search(self, arguments)
        except BriskError as e:  # one line and status 2, as from every brisk entry point
            refuse(e)
