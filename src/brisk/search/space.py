"""The search space: Hydra sweep syntax in, Optuna distributions out, and trials back to override lines.

`hydra.sweeper.params` and sweep overrides on the command line use Hydra's own grammar, parsed by
Hydra's OverridesParser:
- `interval(a, b)` -> a float in [a, b]; `tag(log, interval(a, b))` samples it on a log scale;
- `range(a, b[, step])` -> Hydra's range (b excluded): integers, or floats on a grid of `step`;
- `choice(x, y, ...)` or `x,y,...` -> one of the values.
A plain `key=value` is the same in every trial.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep

from brisk.errors import BriskError

# Group overrides of the search itself: they mean nothing in a single run.
SEARCH_GROUPS = ("hparams_search",)


@dataclass
class Space:
    distributions: dict[str, Any] = field(default_factory=dict)  # override key (`+a.b` too) -> distribution
    fixed: list[str] = field(default_factory=list)  # overrides passed to every trial unchanged

    def overrides(self, params: dict[str, Any]) -> list[str]:
        """The overrides of one trial, exactly as Optuna sampled them."""
        return [*self.fixed, *(f"{key}={format_value(params[key])}" for key in self.distributions)]

    def best_line(self, params: dict[str, Any]) -> str:
        """The overrides that rerun a trial as a single run, floats to 6 significant digits."""
        fixed = [o for o in self.fixed if o.partition("=")[0] not in SEARCH_GROUPS]
        return " ".join([*fixed, *(f"{key}={format_value(params[key], short=True)}" for key in self.distributions)])

    def grid(self) -> dict[str, list]:
        """The values of each parameter, for Optuna's GridSampler (choice and range only)."""
        from optuna.distributions import CategoricalDistribution

        grid = {}
        for key, dist in self.distributions.items():
            if isinstance(dist, CategoricalDistribution):
                grid[key] = list(dist.choices)
            elif dist.step is not None and not dist.log:
                n = round((dist.high - dist.low) / dist.step) + 1
                grid[key] = [dist.low + i * dist.step for i in range(n)]
            else:
                raise BriskError(
                    f"hydra.sweeper.sampler=grid needs choice(...) or range(...) values; {key} is an interval. "
                    "Use sampler=tpe, or give it as range/choice."
                )
        return grid


def parse(params: dict[str, Any] | None, arguments: list[str]) -> Space:
    """`hydra.sweeper.params` plus the command line's overrides; the command line wins for the same key."""
    strings = [f"{k}={v}" for k, v in (params or {}).items()] + list(arguments)
    try:
        parsed = OverridesParser.create().parse_overrides(strings)
    except Exception as e:  # Hydra's parse errors name the override and the position
        raise BriskError(f"hydra.sweeper.params: {e}") from None
    space = Space()
    by_key: dict[str, Override] = {}
    for override in parsed:
        key = override.get_key_element()
        by_key.pop(key, None)  # the command line replaces params, and keeps its own order
        by_key[key] = override
    from_params = {id(o) for o in parsed[: len(params or {})]}
    for key, override in by_key.items():
        if override.is_sweep_override():
            shown = f"hydra.sweeper.params.{key}" if id(override) in from_params else key
            space.distributions[key] = distribution(shown, override.value())
        else:
            space.fixed.append(override.input_line)
    if not space.distributions:
        raise BriskError(
            "the search has nothing to search: give hydra.sweeper.params (see conf/hparams_search/optuna.yaml) "
            "or a sweep on the command line, e.g. 'optimizer.lr=tag(log,interval(0.001,0.1))'."
        )
    return space


def distribution(key: str, sweep: Any):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    log = "log" in sweep.tags
    if isinstance(sweep, IntervalSweep):
        start, end = sweep.start, sweep.end
        if not start < end:
            raise BriskError(
                f"{key}=interval({start}, {end}) holds no values: the start must be below the end, "
                f"e.g. interval({min(start, end)}, {max(start, end) if start != end else 'a larger end'})."
            )
        if log and start <= 0:
            positive = f"e.g. tag(log, interval({end / 1000:g}, {end})), " if end > 0 else "positive bounds, "
            raise BriskError(
                f"{key}=tag(log, interval({start}, {end})): a log scale needs start > 0 (the log of {start} "
                f"is undefined). Use {positive}or drop tag(log, ...)."
            )
        return FloatDistribution(start, end, log=log)
    if isinstance(sweep, RangeSweep):
        step = 1 if sweep.step is None else sweep.step
        n = math.ceil((sweep.stop - sweep.start) / step) if step else 0
        if step <= 0 or n < 1:
            raise BriskError(f"{key}: range({sweep.start}, {sweep.stop}, {step}) holds no values.")
        last = sweep.start + (n - 1) * step
        if log and step != 1:
            raise BriskError(f"{key}: tag(log, range(...)) needs step 1; use tag(log, interval(...)) for floats.")
        if log and sweep.start < 1:
            raise BriskError(
                f"{key}=tag(log, range({sweep.start}, {sweep.stop})): Optuna's log scale of whole numbers needs "
                f"start >= 1. Use e.g. tag(log, range(1, {max(sweep.stop, 2)})), or drop tag(log, ...)."
            )
        if all(isinstance(v, int) for v in (sweep.start, step)):
            return IntDistribution(sweep.start, last, log=log, step=1 if log else step)
        return FloatDistribution(sweep.start, last, step=step)
    if isinstance(sweep, ChoiceSweep):
        return CategoricalDistribution(sweep.list)
    raise BriskError(f"{key}: {type(sweep).__name__} is not a search space; use interval, range or choice.")


def format_value(value: Any, short: bool = False) -> str:
    """A value as Hydra's override grammar reads it back."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, float):
        return format(value, ".6g") if short else repr(value)
    text = str(value)
    return text if re.fullmatch(r"[\w./:@%+-]+", text) else "'" + text.replace("'", "\\'") + "'"
