"""Names -> classes, one registry per kind: what a config, a checkpoint or a run's saved config builds is picked by
its `type`, a registered name, never by a code path.

Building is a dictionary lookup, so no file can make brisk import or call anything it has not registered, and
moving a module breaks no config or checkpoint. A class registers where it is defined
(`@NETS.register("simple_cnn")`); classes brisk does not own register by a call in the brisk package of their kind
(`OPTIMIZERS.register("sgd", torch.optim.SGD)` in brisk.optim). A user's own classes register in their own module,
which the command's config names under `imports` (brisk.imports).

The key is `type`, not `name`: `model.net.name=resnet50` already picks a timm model.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from brisk.errors import BriskError, BuildError
from brisk.utils.config import plain

HOW = 'register yours with @{registry}.register("<name>") in a module listed in imports=[...] (README: Make it yours)'


class Registry:
    """The entries of one kind. `key` is where a config holds one (errors name it); `home` the brisk packages whose
    modules register the shipped entries; `shipped` the module each shipped name registers in, so a lookup imports
    that one module and a run imports only what it builds (a default run: 2 of the 4 net modules, none of the
    image-folder code). A name the index lacks (a net file dropped into brisk/models/nets/) is found by importing
    every module of the home packages."""

    def __init__(self, kind: str, key: str, home: str | tuple[str, ...], name: str, shipped: dict[str, str]) -> None:
        self.kind, self.key, self.name = kind, key, name
        self.home = (home,) if isinstance(home, str) else home
        self.shipped = shipped
        self.__name__ = name  # as brisk's other public names have
        self._entries: dict[str, Callable] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self._loaded = False

    def register(self, name: str, obj: Callable | None = None, **meta: Any):
        """`@REG.register("name")` on a class or function, or `REG.register("name", cls)` for one brisk does not
        own. `meta`: what the kind needs to know of an entry (an augmentation's stage). A name is registered once;
        registering the same object again (a module imported twice under two names) is allowed."""

        def add(entry: Callable) -> Callable:
            if _where(self._entries.setdefault(name, entry)) != _where(entry):
                raise ValueError(f"{self.kind} {name!r} is registered twice: {self._entries[name]} and {entry}")
            self._entries[name] = entry  # the same class again, from a module imported anew: the newer one
            self._meta[name] = meta
            return entry

        return add if obj is None else add(obj)

    def _load(self, again: bool = False) -> None:
        """Import the home module, and each module of a home package: a net file dropped into brisk/models/nets/
        registers with no other edit. `again`: look for modules added since (on a name not found)."""
        if self._loaded and not again:
            return
        self._loaded = True
        for name in self.home:
            home = importlib.import_module(name)
            for module in pkgutil.iter_modules(getattr(home, "__path__", [])):
                if not module.name.startswith("_"):
                    importlib.import_module(f"{name}.{module.name}")

    def _find(self, name: object) -> bool:
        """Whether `name` is registered, importing first the module the index names for it, then, if that does
        not register it, every module of the home packages."""
        if not isinstance(name, str):
            return False
        if name not in self._entries and name in self.shipped:
            importlib.import_module(self.shipped[name])
        if name not in self._entries:
            self._load(again=True)
        return name in self._entries

    def registered(self) -> list[str]:
        """The names registered so far, in the order they were (the augmentation ops: the order they run in)."""
        return list(self._entries)

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return self._find(name)

    def meta(self, name: str) -> dict[str, Any]:
        self._find(name)
        return self._meta.get(name, {})

    def get(self, name: Any, key: str | None = None) -> Callable:
        """The entry registered as `name`; BriskError naming `<key>.type` and the registered names if none is."""
        if self._find(name):
            return self._entries[name]
        key = key or self.key
        where = key if key.endswith(f".{name}") else f"{key}.type={name}"  # data.augment.<op> names itself
        raise BriskError(
            f"{where}: no {self.kind} is registered under that name. Choose one of: {', '.join(self.names())}; "
            f"or {HOW.format(registry=self.name)}.",
        )

    def check(self, spec: Mapping[str, Any], key: str | None = None) -> tuple[Callable, dict[str, Any]]:
        """(the entry `spec["type"]` names, its arguments from `spec`), or BriskError: an unknown name, or an argument
        it does not take, in one line naming the key and the registered names or the entry's real arguments."""
        key = key or self.key
        spec = dict(plain(spec))  # a DictConfig's lists and mappings as plain ones
        entry = self.get(spec.pop("type", None), key)
        check_arguments(entry, spec, key)
        return entry, spec

    def build(self, spec: Mapping[str, Any], key: str | None = None, **given: Any) -> Any:
        """The entry `spec["type"]` called with the rest of `spec` (plain values) and `given` (what the code
        supplies: the parameters, the number of classes)."""
        entry, arguments = self.check(spec, key)
        return construct(entry, key or self.key, **arguments, **given)


def _where(entry: Callable) -> tuple[str, str]:
    return getattr(entry, "__module__", ""), getattr(entry, "__qualname__", repr(entry))


def construct(entry: Callable, key: str, /, **arguments: Any) -> Any:
    """`entry(**arguments)`, with what it raises tied to the config key it was built from (BuildError)."""
    try:
        return entry(**arguments)
    except (BriskError, BuildError):  # a user error as it is; a part's failure keeps the part's key
        raise
    except Exception as e:
        raise BuildError(key, entry) from e


def arguments(entry: Callable) -> tuple[list[str], bool]:
    """The keyword arguments `entry` takes, following `**kwargs` up the classes it is passed to (a DataModule's
    common keys are its base's), and whether it takes any name at all (a `**kwargs` that ends nowhere brisk sees)."""
    names: list[str] = []
    targets: Iterable = entry.__mro__ if inspect.isclass(entry) else (entry,)
    for target in targets:
        function = target.__init__ if inspect.isclass(entry) else target
        if inspect.isclass(entry) and "__init__" not in vars(target):
            continue
        if target is object:
            return names, True
        try:
            parameters = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature: take it at its word
            return names, True
        names += [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            return [n for n in dict.fromkeys(names) if n != "self"], False
    return [n for n in dict.fromkeys(names) if n != "self"], True


def check_arguments(entry: Callable, spec: Mapping[str, Any], key: str, given: Iterable[str] | None = None) -> None:
    """Refuse, in one line naming `<key>.<argument>`, an argument `entry` does not take; with `given` (the names the
    code passes), also one it needs that neither the config nor the code gives."""
    names, any_name = arguments(entry)
    name = getattr(entry, "__name__", entry)
    unknown = [k for k in spec if k not in names]
    if unknown and not any_name:
        close = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f" (did you mean {key}.{close[0]}?)" if close else ""
        raise BriskError(
            f"{key}.{unknown[0]}: {name} takes no argument {unknown[0]!r}{hint}. Remove it, or correct its name; "
            f"its arguments: {', '.join(names) or 'none'}."
        )
    if given is not None:
        required = [p.name for p in _required(entry)]
        if missing := [r for r in required if r not in spec and r not in set(given)]:
            raise BriskError(
                f"{key}.{missing[0]}: {name} needs {missing[0]!r}, and the config gives none. Set it, "
                f"{key}.{missing[0]}=<value>, or leave out the ~{key}.{missing[0]} that removed it."
            )


def _required(entry: Callable) -> list[inspect.Parameter]:
    try:
        parameters = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty]


NETS = Registry(
    "net",
    "model.net",
    "brisk.models.nets",
    "NETS",
    {
        "simple_cnn": "brisk.models.nets.simple_cnn",
        "resnet18": "brisk.models.nets.resnet",
        "airbench": "brisk.models.nets.airbench",
        "timm": "brisk.models.nets.timm_net",
    },
)
DATASETS = Registry(
    "dataset",
    "data",
    "brisk.data",
    "DATASETS",
    {"cifar10": "brisk.data.cifar", "synthetic": "brisk.data.cifar", "image_folder": "brisk.data.image_folder"},
)
OPTIMIZERS = Registry(
    "optimizer",
    "optimizer",
    "brisk.optim",
    "OPTIMIZERS",
    {n: "brisk.optim" for n in ("sgd", "adam", "adamw")}
    | {"muon": "brisk.optim.muon", "sgd_per_1024": "brisk.optim.per_examples"},
)
SCHEDULES = Registry(
    "schedule",
    "scheduler",
    "brisk.optim",
    "SCHEDULES",
    {"onecycle": "brisk.optim", "step": "brisk.optim"}
    | {n: "brisk.optim.schedules" for n in ("cosine", "exp_decay", "warmup_linear")},
)
# The search's callback lives with the search (brisk.search.report); the rest in brisk.callbacks.
CALLBACKS = Registry(
    "callback",
    "callbacks",
    ("brisk.callbacks", "brisk.search.report"),
    "CALLBACKS",
    {
        n: "brisk.callbacks"  # Lightning's, registered in the package
        for n in ("model_checkpoint", "lr_monitor", "early_stopping", "ema", "swa", "accumulation_schedule")
    }
    | {
        "last_checkpoint": "brisk.callbacks.checkpoint",
        "lookahead": "brisk.callbacks.lookahead",
        "plots": "brisk.callbacks.run_plots",
        "progress_bar": "brisk.callbacks.progress_bar",
        "prune": "brisk.callbacks.pruning",
        "optuna_trial": "brisk.search.report",
    },
)
LOGGERS = Registry(
    "logger",
    "logger",
    "brisk.run.loggers",
    "LOGGERS",
    dict.fromkeys(("csv", "mlflow", "tensorboard", "wandb"), "brisk.run.loggers"),
)
PROFILERS = Registry(
    "profiler",
    "trainer.profiler",
    "brisk.run.loggers",
    "PROFILERS",
    dict.fromkeys(("advanced", "pytorch", "simple"), "brisk.run.loggers"),
)
AUGMENTS = Registry(
    "augmentation",
    "data.augment",
    "brisk.data",
    "AUGMENTS",
    dict.fromkeys(
        (
            "color_jitter",
            "crop_pad",
            "cutmix_alpha",
            "cutout_size",
            "erasing",
            "flip",
            "mixup_alpha",
            "policy",
            "rotate",
            "scale",
        ),
        "brisk.data.augment_ops",
    ),
)
# What a config builds by name at one place (its key), and in name -> config groups.
SINGLE = (NETS, DATASETS, OPTIMIZERS, SCHEDULES)
GROUPS = (CALLBACKS, LOGGERS)


def import_modules(names: Any) -> None:
    """Import the modules a command's own config lists under `imports`, so that their `register` calls run before
    anything is built. Only the entry points call it, with the composed config (conf/, --config-dir, the command
    line): never with what a run's files hold, which may not even contain the key (brisk.checkpoints.restore)."""
    if not names:
        return
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise BriskError(f"imports={names}: a list of module names, e.g. imports=[my_pkg.nets].")
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise BriskError(
                f"imports: cannot import {name} ({e}). Put the folder that holds it on PYTHONPATH, or install its "
                "package (pip install -e <its project>)."
            ) from None
