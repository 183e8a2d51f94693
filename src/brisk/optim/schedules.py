"""Learning-rate schedules torch does not ship as one class. Each returns a LambdaLR."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from brisk.errors import BriskError, check
from brisk.registry import SCHEDULES, arguments

log = logging.getLogger("brisk")

# A warm-up is a share of the run's steps: above 1 it is longer than the run, and the lr never comes down. The
# planned schedules check their ranges as they are built with the run's total steps, in configure_optimizers: before
# the first optimizer step (a NaN start or final made every lr NaN only once training had begun).
SHARE = "a share of the run's steps in [0, 1] (0.23: its first 23%)"
TIMES_LR = "a number >= 0 (a multiple of the base lr)"
# OneCycleLR's other way to give its length (epochs x steps_per_epoch), which torch reads only without the total_steps
# that build() passes: no scheduler key (brisk.run.schemas), and refused where a + adds one.
LENGTH_KEYS = ("epochs", "steps_per_epoch")


@SCHEDULES.register("cosine")
def cosine_with_warmup(optimizer: Optimizer, total_steps: int, warmup: float = 0.05, final: float = 0.0) -> LambdaLR:
    """Linear warmup over the first `warmup` fraction of steps, then cosine decay to `final` x base lr."""
    check("scheduler.warmup", warmup, lambda v: 0 <= v <= 1, SHARE)
    check("scheduler.final", final, lambda v: v >= 0, TIMES_LR)
    warmup_steps = max(1, int(warmup * total_steps))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


@SCHEDULES.register("warmup_linear")
def warmup_linear(
    optimizer: Optimizer, total_steps: int, warmup: float = 0.23, start: float = 0.2, final: float = 0.0
) -> LambdaLR:
    """From `start` x base lr up to the base lr over the first `warmup` fraction of steps, then straight down to
    `final` x: airbench94's schedule (0.2 -> 1 over 23% of the steps -> 0)."""
    check("scheduler.warmup", warmup, lambda v: 0 <= v <= 1, SHARE)
    check("scheduler.start", start, lambda v: v >= 0, TIMES_LR)
    check("scheduler.final", final, lambda v: v >= 0, TIMES_LR)
    peak = max(1, round(warmup * total_steps))

    def factor(step: int) -> float:
        if step < peak:
            return start + (1 - start) * step / peak
        return 1 + (final - 1) * min(1.0, (step - peak) / max(1, total_steps - peak))

    return LambdaLR(optimizer, factor)


@SCHEDULES.register("exp_decay")
def exp_decay(optimizer: Optimizer, constant_epochs: int = 10, k: float = 0.1) -> LambdaLR:
    """Keras's LearningRateScheduler recipe (stepped per epoch): the base lr for epochs 0..constant_epochs-1, then
    x exp(-k) per epoch from epoch `constant_epochs` on, so epoch 10 runs at x0.9048 and epoch 11 at x0.8187.

    Keras's documented example, `lr if epoch < 10 else lr * exp(-0.1)`, is called with the 0-based epoch
    at each epoch's start and multiplies the previous epoch's lr, so epoch e >= 10 runs at exp(-0.1 (e - 9)).
    """
    check("scheduler.constant_epochs", constant_epochs, lambda v: v >= 0, "a whole number >= 0 (epochs)", int)
    check("scheduler.k", k, lambda v: True, "a number (the decay per epoch)")  # NaN would make every lr NaN
    return LambdaLR(optimizer, lambda epoch: math.exp(-k * max(0, epoch - constant_epochs + 1)))


def planned(config) -> bool:
    """Whether a scheduler config plans its course over the whole run (it takes total_steps): OneCycle, cosine."""
    return bool(config) and "total_steps" in arguments(SCHEDULES.get(config.get("type")))[0]


def build(config: dict, optimizer: Optimizer, total_steps: Callable[[str], int]):
    """A scheduler config (its `type`, arguments and `interval`) -> (scheduler, interval).

    `total_steps(interval)` is only called for schedulers that take a `total_steps` argument.
    """
    config = dict(config)
    interval = config.pop("interval", "step")
    make = SCHEDULES.get(config.get("type"))
    kwargs = {}
    parameters = inspect.signature(make).parameters
    if "total_steps" in parameters:
        if given := next((k for k in LENGTH_KEYS if config.get(k) is not None), None):  # +scheduler.epochs=30
            raise BriskError(
                f"scheduler.{given}={config[given]}: scheduler={config.get('type')} runs over the whole run, whose "
                "optimizer steps brisk counts and passes as total_steps, and torch ignores scheduler."
                f"{given} beside it. Remove it; set the run's length with trainer.max_epochs or trainer.max_steps.",
                f"scheduler.{given}",
            )
        kwargs["total_steps"] = int(total_steps(interval))
        kwargs.update(_fit_horizon(make, config, parameters, kwargs["total_steps"], interval))
    # PerExamplesSGD's lr is per 1024 examples: its step lr is that times lr_scale.
    scale = getattr(optimizer, "lr_scale", 1.0)
    mults = [group.get("lr_mult", 1.0) * scale for group in optimizer.param_groups]
    if "max_lr" in config and any(m != 1 for m in mults):
        # OneCycleLR sets each group's lr from max_lr, not from the group's own: one max_lr per group, scaled
        # (a group's lr_mult, brisk.models.param_groups). Schedulers that scale the group's lr keep it as it is.
        kwargs["max_lr"] = [float(config["max_lr"]) * m for m in mults]
    return SCHEDULES.build({**config, **kwargs}, optimizer=optimizer), interval


def _fit_horizon(make, config: dict, parameters, total: int, interval: str) -> dict:
    """The keyword arguments that make a planned schedule run over `total` steps: {} for most runs, a warm-up of
    two steps where pct_start gives exactly one. Refuses, before training, what no adjustment can run."""
    name = getattr(make, "__name__", str(make))
    if total < 1:
        raise BriskError(
            f"scheduler {name} plans over the run's {interval}s, and this run has {total}. "
            "Train for at least one optimizer step, or use scheduler=none."
        )
    pct = config.get("pct_start", parameters["pct_start"].default) if "pct_start" in parameters else None
    if pct is None or float(pct * total) != 1.0:
        return {}
    # torch's OneCycleLR ends a one-step warm-up on the step it starts, and divides by zero. Small runs (4 steps at
    # the default 0.25, e.g. one epoch of 4 batches) get the shortest warm-up it can run, two steps, with one or
    # more left to anneal; a 2-step run has none left, so only its explicit pct_start=0.5 is refused.
    if total < 3:
        raise BriskError(
            f"scheduler.pct_start={pct} x {total} optimizer steps is a warm-up of exactly one step, which {name} "
            "cannot schedule (a ZeroDivisionError in torch). Change scheduler.pct_start (e.g. 0.3), train more "
            "steps (trainer.max_epochs, a smaller data.batch_size or less accumulation), or use scheduler=cosine."
        )
    log.info(
        "scheduler.pct_start=%s x %d optimizer steps is a warm-up of one step, which %s cannot run: warming up "
        "over 2 steps instead (pct_start=%.4g). Train more steps to keep pct_start as it is.",
        pct,
        total,
        name,
        2 / total,
    )
    return {"pct_start": 2 / total}
