"""The grid sweep of `brisk-train -m a=1,2 b=x,y` (`hydra/sweeper=grid`, the default in conf/hydra/default.yaml;
the plugin class is hydra_plugins.brisk_grid).

Hydra's basic sweeper, except at a failed job: Hydra's re-raises the first failure once its batch ends, so the
sweep ends in that job's traceback, later batches never run, and Hydra's on_multirun_end (where the runs'
comparison is written and the sweep folder printed) is never reached. This one runs every batch and returns
every job's outcome; brisk.search.SweepSummary names the failed jobs in one line at the end and exits 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf

from brisk import compat
from brisk.errors import BriskError
from brisk.utils.files import write_text


def sweep(basic: Any, arguments: list[str]) -> list[Any]:
    """Hydra's BasicSweeper.sweep (`basic`: brisk.compat.basic_sweeper) without its raise: every batch is launched,
    and each job's JobReturn is returned."""
    parser = OverridesParser.create(config_loader=basic.hydra_context.config_loader)
    overrides = parser.parse_overrides([*compat.sweep_params(basic), *arguments])
    if empty := next((o for o in overrides if _no_values(o)), None):
        # Hydra would launch 0 jobs and exit 0, leaving an empty sweep folder
        raise BriskError(
            f"{empty.input_line}: the sweep has no values, so no job would run. Give it at least one: a range's "
            "start below its stop (range(0,3)), or a list (a,b)."
        )
    basic.overrides = basic.split_arguments(overrides, basic.max_batch_size)
    sweep_dir = Path(basic.config.hydra.sweep.dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_text(sweep_dir / "multirun.yaml", OmegaConf.to_yaml(basic.config))  # as Hydra's sweeper does
    returns, first = [], 0
    while not basic.is_done():
        batch = basic.get_job_batch()
        basic.validate_batch_is_legal(batch)  # every job of the batch composes, before any of them runs
        returns.append(basic.launcher.launch(batch, initial_job_idx=first))
        first += len(batch)
    return returns


def _no_values(override: Any) -> bool:
    """A choice or range sweep that gives no value (range(0,0)). An interval is no list: Hydra's sweeper refuses it."""
    try:
        return override.is_sweep_override() and not any(True for _ in override.sweep_string_iterator())
    except HydraException:
        return False
