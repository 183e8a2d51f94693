"""Config schemas made from the constructors' own signatures, so that a default is written once, in Python.

Each schema is a dataclass in Hydra's ConfigStore that a YAML option starts from (`defaults: [<schema>, _self_]`).
Composing against it gives every argument without a `+` (`trainer.benchmark=true`), refuses a value of the wrong
type or a misspelt key at compose time with its full key, and puts the library's own default in the run's record.

Written over `inspect.signature` rather than with hydra-zen's `builds`: 40 lines against a dependency and 0.1 s
of import, and a schema here carries no `_target_` (a run's files name no code, docs/reliability.md). Types
OmegaConf cannot hold (a Strategy, a Literal, a timedelta) become Any: the constructor still checks them. Ranges
live in the constructors too: a dataclass's __post_init__ does not run at compose time.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Any, Union

from hydra.core.config_store import ConfigStore

PRIMITIVES = (bool, int, float, str)
# The arguments of Lightning's Tuner.lr_find and .scale_batch_size that brisk passes itself (brisk.run.tune): the
# model, its data, the stage, where the value goes.
FINDER_SET_BY_BRISK = {"self", "model", "datamodule", "method", "update_attr", "attr_name", "batch_arg_name"}
FINDER_SET_BY_BRISK |= {"train_dataloaders", "val_dataloaders", "dataloaders"}


def _field_type(hint: Any) -> Any:
    """The hint if OmegaConf can check it (a primitive, a Union or Optional of primitives), else Any."""
    if hint in PRIMITIVES:
        return hint
    if typing.get_origin(hint) in (Union, types.UnionType):
        kept = [a for a in typing.get_args(hint) if a is not type(None)]
        if kept and all(a in PRIMITIVES for a in kept):
            # typing's Union, not `X | Y`: OmegaConf 2.3 reads only the former
            one = Union[tuple(kept)] if len(kept) > 1 else kept[0]  # noqa: UP007
            return typing.Optional[one] if len(kept) < len(typing.get_args(hint)) else one  # noqa: UP045
    return Any


def from_signature(name: str, *fns: Any, skip: tuple[str, ...] = (), extra: dict[str, Any] | None = None) -> type:
    """A dataclass with one field per keyword argument of `fns` (a class's own, then its base's: what **kwargs
    passes on), less `skip`, typed and defaulted as the function says, plus `extra` fields ({name: default}, Any).
    An argument without a default is mandatory (??? until set); one whose default is an object YAML cannot write
    is left out, and keeps that default."""
    fields = [(key, Any, dataclasses.field(default_factory=lambda v=value: v)) for key, value in (extra or {}).items()]
    for fn in fns:
        # the arguments' hints alone: a return hint may name what only a type checker imports (Tuner.lr_find's)
        given = types.SimpleNamespace(__annotations__={k: v for k, v in fn.__annotations__.items() if k != "return"})
        try:
            hints = typing.get_type_hints(given, globalns=inspect.unwrap(fn).__globals__)
        except Exception:  # a hint that names what this process has not imported: the field is Any
            hints = {}
        for p in inspect.signature(fn).parameters.values():
            if p.name not in skip and p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                _add(fields, p, _field_type(hints.get(p.name, Any)))
    return dataclasses.make_dataclass(name, fields)


def _add(fields: list, p: inspect.Parameter, kind: Any) -> None:
    if any(f[0] == p.name for f in fields):
        return  # the subclass's own
    if p.default is p.empty:
        fields.append((p.name, kind, dataclasses.field(default="???")))
    elif not isinstance(p.default, (*PRIMITIVES, list, dict, tuple, type(None))):
        return  # an object (a theme, a device): YAML cannot write one, the constructor keeps its own
    elif isinstance(p.default, (list, dict, tuple)):
        fields.append((p.name, Any, dataclasses.field(default_factory=lambda d=p.default: d)))
    else:
        optional = kind if p.default is not None or kind is Any else typing.Optional[kind]  # noqa: UP045
        fields.append((p.name, optional, p.default))


def store() -> None:
    """The schemas, as configs of no group (so no command lists them as options): a YAML file starts from one with
    `- /<name>_schema@_here_` in its defaults. Called (by brisk.conf) before any config is composed."""
    import lightning as L

    from brisk.models.classifier import ImageClassifier

    store = ConfigStore.instance().store
    # brisk builds the callbacks and loggers from their own groups (brisk.run.builder)
    store(name="trainer_schema", node=from_signature("Trainer", L.Trainer.__init__, skip=("callbacks", "logger")))
    # the optimizer and schedule have groups of their own, the class names come from the data (brisk.models.build)
    model = from_signature("Model", ImageClassifier.__init__, skip=("optimizer", "scheduler", "class_names"))
    store(name="model_schema", node=model)
    # one per torch optimizer (conf/optimizer/sgd.yaml starts from sgd_optimizer_schema), with its `type`: every
    # argument works without a +. Less the parameters, which the classifier passes, and weight_decay, which its
    # parameter groups set (model.weight_decay). brisk's own optimizers (muon, sgd_per_1024) have none: their modules
    # would then be imported into every command.
    from lightning.pytorch.tuner import Tuner

    from brisk.registry import CALLBACKS, OPTIMIZERS, SCHEDULES

    optimizers = {n: OPTIMIZERS.get(n) for n, module in OPTIMIZERS.shipped.items() if module == "brisk.optim"}
    _each(store, "optimizer", optimizers, skip=("params", "weight_decay"))
    # one per shipped schedule, with its `interval` (how often Lightning steps it); less the optimizer and the run's
    # total_steps, which brisk passes (brisk.optim.schedules.build), OneCycleLR's other way to say it (LENGTH_KEYS),
    # and last_epoch, which Lightning restores on a resume. Their module is every run's.
    from brisk.optim.schedules import LENGTH_KEYS

    schedules = {n: SCHEDULES.get(n) for n in SCHEDULES.shipped}
    skip = ("optimizer", "total_steps", *LENGTH_KEYS, "last_epoch")
    _each(store, "scheduler", schedules, skip=skip, extra={"interval": "step"})
    # one per Lightning callback a config picks by name: a lever's file starts from its schema (callbacks/ema.yaml).
    # Only those registered in brisk.callbacks itself: a schema of brisk's own callbacks would import every one of
    # them (pruning, the plots, the search's) into every command.
    callbacks = {n: CALLBACKS.get(n) for n, module in CALLBACKS.shipped.items() if module == "brisk.callbacks"}
    _each(store, "callback", callbacks)
    # one per finder of tune=lr|batch_size (conf/tune/), named by its `method`, the Tuner's method (whose own `method`
    # is brisk's "fit"): each argument works without a + (tune.mode=linear), at Lightning's default
    finders = {m: getattr(Tuner, m) for m in ("lr_find", "scale_batch_size")}
    _each(store, "tune", finders, skip=tuple(FINDER_SET_BY_BRISK), key="method")
    _data(store)


def _each(store, kind: str, entries: dict[str, Any], skip=(), extra=None, key: str = "type") -> None:
    """A schema per entry, stored as <name>_<kind>_schema, with `key` (what a config picks it by) set to its name."""
    for name, entry in entries.items():
        fn = entry.__init__ if isinstance(entry, type) else entry  # a class's hints are its __init__'s
        node = from_signature(f"{kind.capitalize()}_{name}", fn, skip=skip, extra={key: name, **(extra or {})})
        store(name=f"{name}_{kind}_schema", node=node)


def _data(store) -> None:
    """A schema per shipped CIFAR-format dataset: its class's arguments and the shared base's (brisk.data.base), with
    its `type` and every shipped augmentation key at its off value (data.augment.rotate=15 works without a +). And
    the shared keys untyped, as `datamodule`: a dataset of the user's own (or image_folder) starts from it and adds
    its own keys (docs/data.md)."""
    from brisk.data import augment_ops
    from brisk.data.base import TensorDataModule
    from brisk.registry import DATASETS

    augment = {"augment": augment_ops.off()}
    base = from_signature("Data", TensorDataModule.__init__, skip=("augment",), extra=augment)
    store(name="datamodule", node=dataclasses.asdict(base()))
    # Those in brisk.data.cifar only: image_folder's would import the image-folder code into every command.
    for name in (n for n, module in DATASETS.shipped.items() if module == "brisk.data.cifar"):
        fns = (DATASETS.get(name).__init__, TensorDataModule.__init__)
        node = from_signature(f"Data_{name}", *fns, skip=("augment",), extra={"type": name, **augment})
        store(name=f"{name}_data_schema", node=node)
