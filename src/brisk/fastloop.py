"""The per-step speed tricks, all of them here: what Lightning's loop costs a step at nil compute, cut through the
hooks and attributes it reads, with what each buys. The LightningModule and the callbacks stay as the Lightning
docs write them; `fast_loop: true` (the default) has the builder apply this module, `fast_loop=false` gives plain
Lightning, and brisk-bench's breakdown has a row for each (the `fast_loop=false` row shows what this buys).

Counted with sys.setprofile on the lab's nil-compute net (brisk-bench's breakdown, lightning 2.6.6): the default
fit makes ~1,750 calls a step over a plain PyTorch loop with these, ~3,150 without the skipped hooks alone.
Every private Lightning name used here is in `missing()`, which tests/project/test_compat.py checks.
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
from collections.abc import Iterable, Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loops import _FitLoop
from lightning.pytorch.profilers import Profiler
from lightning.pytorch.trainer.connectors.logger_connector import _LoggerConnector

# The hooks Lightning calls on every batch. Its dispatch (trainer/call.py) skips an attribute that is not callable;
# a call costs ~15 Python calls (a profiler context, the callback's state_key) even when the hook is the base
# class's empty one.
BATCH_HOOKS = (
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)
# The LightningModule's: its evaluation batch hooks stay, Lightning reads their signatures (loops/utilities.py).
TRAINING_HOOKS = BATCH_HOOKS[:6]
# Lightning's dispatch sets the LightningModule's `_current_fx_name` before and after every hook it calls.
HOOK_NAME = "_current_fx_name"


def skip_empty_hooks(obj: L.Callback | L.LightningModule) -> None:
    """The per-batch hooks `obj` leaves as its base class's empty ones set to None, which Lightning's dispatch
    skips: ~230 calls a step for the classifier's six, ~15 per empty hook of each callback. What runs is the same."""
    base, hooks = (L.Callback, BATCH_HOOKS) if isinstance(obj, L.Callback) else (L.LightningModule, TRAINING_HOOKS)
    for hook in hooks:
        if getattr(type(obj), hook) is getattr(base, hook):
            setattr(obj, hook, None)


class NoProfiler(Profiler):
    """The Trainer's profiler when the config names none. Lightning's default, PassThroughProfiler, times nothing,
    but its `profile()` is a contextlib generator entered around every hook (~20 a step): some ten calls each;
    this hands back one null context."""

    _NOTHING = contextlib.nullcontext()

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass

    def profile(self, action_name: str) -> contextlib.AbstractContextManager:
        return self._NOTHING


def logs_this_step(trainer: L.Trainer) -> bool:
    """Whether Lightning writes the logged step values to the loggers after this training batch, as its logger
    connector decides: on a logging step, and under gradient accumulation only on the batch that steps the
    optimizer. There is no public property (LearningRateMonitor asks the same)."""
    return trainer._logger_connector.should_update_logs and not (
        trainer.lightning_module.automatic_optimization and trainer.fit_loop._should_accumulate()
    )


class FastModule:
    """What `model()` mixes into a LightningModule's class."""

    def __setattr__(self, name: str, value: Any) -> None:
        # `_current_fx_name` as a plain attribute: nn.Module.__setattr__ first looks for the name among parameters,
        # buffers and submodules (1.39 us a set against 0.13 us on the 2-core VM; 32 sets a step on the speedrun
        # path, ~0.04 ms). What is stored is the same.
        if name == HOOK_NAME:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        # A step-only log in training_step only on the steps after which Lightning writes logs: on the others its
        # value reaches no logger, and a log costs ~2,000 calls (brisk-bench's breakdown). Between logging steps,
        # callback_metrics holds the last value logged.
        step_only = kwargs.get("on_step") is True and kwargs.get("on_epoch") is False
        if step_only and self._current_fx_name == "training_step" and not logs_this_step(self.trainer):
            return
        super().log(name, value, *args, **kwargs)

    def __reduce_ex__(self, protocol):
        # Pickled (ddp_spawn sends the model to its processes) as the module's own class: the fast class is made
        # at run time and cannot be found by name. The child then runs plain Lightning.
        reduced = super().__reduce_ex__(protocol)
        if reduced[0] is copyreg.__newobj__:  # pickle checks that __newobj__ makes the object's own class
            return (_made, (type(self).__mro__[2], *reduced[1][1:]), *reduced[2:])
        return reduced


def _made(cls: type, *args: Any) -> Any:
    """What copyreg.__newobj__ does, for the module's own class (FastModule.__reduce_ex__)."""
    return cls.__new__(cls, *args)


@functools.cache
def _fast(cls: type) -> type:
    return type(cls.__name__, (FastModule, cls), {"__module__": cls.__module__, "__doc__": cls.__doc__})


def model(module: L.LightningModule) -> None:
    """The LightningModule's part: its empty training hooks skipped, its hook name stored quickly, its step-only
    training logs made only when they are written (FastModule)."""
    skip_empty_hooks(module)
    if not isinstance(module, FastModule):
        module.__class__ = _fast(type(module))


def trainer(built: L.Trainer, specs: Iterable[tuple[L.Callback, Mapping]] = ()) -> None:
    """The Trainer's part: every callback's empty batch hooks skipped, and a ModelCheckpoint built (`specs`: each
    callback with the arguments the builder gave it) without a step or time trigger left out of every step: its
    on_train_batch_end only runs its checks then, and Lightning builds its state_key for each call (~20 us a step
    each). The profiler is the builder's: NoProfiler unless the config names one."""
    for callback, spec in specs:
        triggers = spec.get("every_n_train_steps") or spec.get("train_time_interval") is not None
        if isinstance(callback, ModelCheckpoint) and not triggers:  # LastCheckpoint's own steps count too
            callback.on_train_batch_end = None
    for callback in built.callbacks:  # with those Lightning adds itself (the model summary)
        skip_empty_hooks(callback)


# (owner, attribute) for each private name above: what `missing()` checks.
_USED = [
    (L.Trainer, "_logger_connector"),
    (_LoggerConnector, "should_update_logs"),
    (_FitLoop, "_should_accumulate"),
    (L.LightningModule, HOOK_NAME),
]


def missing() -> list[str]:
    """The private names this module relies on that this Lightning no longer has."""
    built = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    instances = {
        L.Trainer: built,
        _FitLoop: built.fit_loop,
        _LoggerConnector: getattr(built, "_logger_connector", None),
    }
    instances[L.LightningModule] = L.LightningModule()
    return [
        f"{owner.__module__}.{owner.__qualname__}.{name}"
        for owner, name in _USED
        if not hasattr(owner, name) and not hasattr(instances.get(owner), name)
    ]
