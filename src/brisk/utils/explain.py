"""`explain`: what Hydra, OmegaConf and the constructors Hydra calls raise for mistakes the user can fix, as one
BriskError line. Hydra wraps whatever a constructor raises in its InstantiationException (brisk's own BriskError
included) and says where only in its message; its composition errors are several lines. `explain` finds the cause,
names the config key it belongs to and says the fix, in one line. Anything it does not know is a bug and stays as it is.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.errors import (
    CompactHydraException,
    HydraException,
    InstantiationException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

import brisk.compat as compat
from brisk.errors import BriskError, BuildError, first_line


def explain(error: BaseException, overrides: Sequence[str] = (), folders: Sequence[str] = ()) -> BriskError | None:
    """The one-line error for a mistake in the config or on the command line, or None for anything else.

    `overrides`: the command line's, to name the ones that set the key at fault. `folders`: the config folders the
    command composes from (brisk.cli.config_folders), to name a group option that holds a key not in the config."""
    innermost = error
    while isinstance(innermost.__cause__, InstantiationException | BuildError):
        innermost = innermost.__cause__
    cause = innermost.__cause__ if isinstance(innermost, InstantiationException | BuildError) else innermost
    if isinstance(cause, BriskError):
        return cause
    if isinstance(innermost, BuildError) and cause is not None:
        return _refused(innermost.key, innermost.shown, cause, list(overrides))
    instantiated = isinstance(innermost, InstantiationException) and cause is not None
    if instantiated and (found := _constructor(innermost, cause, list(overrides))):
        return found
    if isinstance(cause, OmegaConfBaseException):
        return _config_value(cause)
    if isinstance(error, CompactHydraException) and not isinstance(error, InstantiationException):
        return _composition(error, list(overrides), folders)
    if isinstance(error, HydraException) and "does not support sweep type" in str(error):
        ranged = next((o for o in overrides if re.search(r"=\s*(interval|tag)\(", o)), "a range")
        return BriskError(
            f"{ranged}: Hydra's default sweeper runs lists (key=a,b,c), not ranges. Search a range with "
            "hparams_search=optuna (docs/search.md).",
            ranged.partition("=")[0],
        )
    if key := _trainer_argument(cause):
        by = " ".join(_set_by(key, list(overrides)))
        return BriskError(f"{key}: Lightning refused it: {_line(cause).rstrip('.')}. Fix the value ({by or key}).", key)
    if (package := _missing_package(error)) and (extra := _extra_for(package)):  # e.g. hparams_search=optuna
        given = next((o for o in overrides if package in o.partition("=")[2]), None)
        return BriskError(
            f"{given + ': it needs ' if given else ''}{package}, which is not installed. Install it: "
            f"pip install -e '.[{extra}]' (brisk's {extra} extra)."
        )
    return None


def _line(text: object) -> str:
    if isinstance(text, KeyError) and text.args and isinstance(text.args[0], str):  # str(): a repr, with "\\n" in it
        text = text.args[0]
    return " ".join(str(text).split())


def _set_by(key: str, overrides: list[str]) -> list[str]:
    """The overrides that set `key`, something under it or the group above it, the last of each key."""
    last = {}
    for override in overrides:
        name = override.partition("=")[0].lstrip("+~")
        if name == key or name.startswith(f"{key}.") or key.startswith(f"{name}."):
            last[name] = override
    return list(last.values())[-6:]


def _parameters(target: str) -> list[str]:
    """The keyword arguments of `target`, if its module is already imported (nothing is imported to find out)."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if (obj := sys.modules.get(".".join(parts[:i]))) is not None:
            for part in parts[i:]:
                obj = getattr(obj, part, None)
            try:
                return [p.name for p in inspect.signature(obj).parameters.values() if p.kind.name != "VAR_KEYWORD"]
            except (TypeError, ValueError):
                return []
    return []


def _did_you_mean(word: str, choices: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, choices, n=3)
    return f" (did you mean {' or '.join(prefix + c for c in close)}?)" if close else ""


def _constructor(error: InstantiationException, cause: BaseException, overrides: list[str]) -> BriskError | None:
    target, full_key = compat.instantiation_site(error)
    if target is None:
        return None
    text = str(cause)
    unexpected = re.search(r"unexpected keyword argument '(\w+)'", text)
    missing = (
        re.findall(r"'(\w+)'", m[1]) if (m := re.search(r"missing \d+ required .*?arguments?: (.+)", text)) else []
    )
    arg = unexpected[1] if unexpected else (missing[0] if missing else None)
    key, shown = full_key or target, target  # what Hydra instantiates: hydra.sweeper, its sampler and pruner
    if isinstance(cause, TypeError) and unexpected:
        hint = _did_you_mean(arg, _parameters(target), f"{key}.")
        given = next((o for o in overrides if o.partition("=")[0].lstrip("+") == f"{key}.{arg}"), f"{key}.{arg}")
        return BriskError(f"{key}.{arg}: {shown} takes no argument {arg!r}{hint}. Remove {given}, or correct its name.")
    if isinstance(cause, TypeError) and missing:
        return BriskError(
            f"{', '.join(f'{key}.{a}' for a in missing)}: {shown} needs {' and '.join(map(repr, missing))}, and the "
            f"config gives none. Set it: {key}.{missing[0]}=<value>."
        )
    package = _missing_package(cause)
    if isinstance(cause, ImportError) and package in (None, target.split(".")[0]):  # the name itself is wrong
        return BriskError(f"{key}._target_={shown}: nothing can be imported by that name. Correct the name.")
    return _refused(key, shown, cause, overrides)


def _refused(key: str, shown: str, cause: BaseException, overrides: list[str]) -> BriskError | None:
    """What the constructor of `shown`, built from `key`, raised, if it is a user's mistake: a package it needs, or
    settings it refused."""
    package = _missing_package(cause)
    if package:
        extra = _extra_for(package)
        install = f"pip install -e '.[{extra}]' (brisk's {extra} extra)" if extra else f"pip install {package}"
        undo = " ".join(_set_by(key, overrides))
        return BriskError(
            f"{key}: {shown} needs {package}, which is not installed. Install it: {install}"
            + (f", or change {undo}." if undo else ".")
        )
    misconfiguration = sys.modules.get("lightning.fabric.utilities.exceptions")
    if isinstance(cause, ValueError) or (
        misconfiguration is not None and isinstance(cause, misconfiguration.MisconfigurationException)
    ):
        said = _line(cause).rstrip(".")
    elif isinstance(cause, TypeError | IndexError | KeyError) and _raised_outside_brisk(cause):
        # a library's constructor that indexes or adds up a value of the wrong shape, such as AdamW's betas=[0.9]
        said = f"{type(cause).__name__}: {_line(cause).rstrip('.')}"
    else:
        return None
    by = _set_by(key, overrides)
    # the one override under the entry that the message quotes: trainer.max_time=abc, where Lightning names only
    # `Timer(duration='abc')`, or trainer.accelerator=mps, where it names `accelerator`
    quoted = [o for o in by if o.partition("=")[0].lstrip("+~").startswith(f"{key}.") and _quotes(said, o)]
    if len(quoted) == 1:
        key, by = quoted[0].partition("=")[0].lstrip("+~"), quoted
    return BriskError(
        f"{key}: {shown} refused its settings: {said}. Fix the value" + (f" ({' '.join(by)})." if by else ".")
    )


def _quotes(text: str, override: str) -> bool:
    """The message quotes the override's value ('abc') or names its key's last part (`accelerator`)."""
    name, _, value = override.partition("=")
    value = value.strip("'\"")
    return (bool(value) and f"'{value}'" in text) or f"`{name.rpartition('.')[2]}`" in text


def _trainer_argument(cause: BaseException | None) -> str | None:
    """trainer.<name>, where Lightning's own code refused a value once fit ran and named one of its Trainer's
    arguments in backquotes ("`val_check_interval` (5000) must be less than ... the training batches (11)")."""
    lightning = sys.modules.get("lightning.pytorch")
    misconfiguration = sys.modules.get("lightning.fabric.utilities.exceptions")
    kinds = (ValueError, *((misconfiguration.MisconfigurationException,) if misconfiguration else ()))
    if lightning is None or not isinstance(cause, kinds):
        return None
    frames = traceback.extract_tb(cause.__traceback__)
    if not frames or f"{os.sep}lightning{os.sep}" not in frames[-1].filename:
        return None
    arguments = inspect.signature(lightning.Trainer.__init__).parameters
    return next((f"trainer.{n}" for n in re.findall(r"`(\w+)`", str(cause)) if n in arguments), None)


def _raised_outside_brisk(cause: BaseException) -> bool:
    """Raised in a library's code (torch's, Lightning's), not brisk's own: there it is a bug, whose traceback stays."""
    frames = traceback.extract_tb(cause.__traceback__)
    return bool(frames) and not frames[-1].filename.startswith(str(Path(__file__).parents[1]))


def _missing_package(cause: BaseException) -> str | None:
    """The top-level name of the module that could not be imported, anywhere in the cause's chain."""
    while cause is not None:
        if isinstance(cause, ModuleNotFoundError):
            name = cause.name or next(iter(re.findall(r"['\"]([A-Za-z_][\w.\-]*)", str(cause))), None)
            return name.split(".")[0] if name else None
        cause = cause.__cause__
    return None


def _extra_for(package: str) -> str | None:
    """The extra of this project's distribution that installs `package` (`wandb` -> `wandb`), if any."""
    try:
        requirements = importlib.metadata.requires(__name__.partition(".")[0]) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for requirement in requirements:
        m = re.match(r"([A-Za-z0-9][\w.\-]*).*extra == ['\"]([\w\-]+)['\"]", requirement)
        if m and m[2] != "dev" and re.sub(r"[-_.]+", "_", m[1]).lower() == re.sub(r"[-_.]+", "_", package).lower():
            return m[2]
    return None


def _stored_options(group: str, key: str) -> str:
    """The options of a group in Hydra's ConfigStore (hydra/launcher: joblib, submitit_local...) that have `key`."""
    node = ConfigStore.instance().repo
    for part in group.split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return " or ".join(sorted(n.removesuffix(".yaml") for n, c in node.items() if key in getattr(c, "node", {})))


def _config_value(cause: OmegaConfBaseException) -> BriskError:
    key = cause.full_key or "the config"
    text = first_line(cause)
    if isinstance(cause, MissingMandatoryValue):
        return BriskError(f"{key}: no value (??? in the config). Give it one: {key}=<value>.")
    if isinstance(cause, InterpolationResolutionError):
        text = re.sub(r"^\w+ raised while resolving interpolation: ", "", text).strip("\"'")
        return BriskError(
            f"{key}: its ${{...}} cannot be resolved: {text}. Set what it refers to, or give {key} a plain value."
        )
    if isinstance(cause, ConfigKeyError | ConfigAttributeError):
        return BriskError(f"{key}: not in the config, and brisk needs it. Leave out ~{key} or give it: +{key}=<value>.")
    return BriskError(f"{key}: {text}.")


def _composition(error: CompactHydraException, overrides: list[str], folders: Sequence[str]) -> BriskError:
    """Hydra's own errors while it reads the command line and composes the config."""
    if isinstance(error, OverrideParseException):
        return BriskError(
            f"{error.override}: Hydra cannot read this override ({first_line(error.message)}). Quote a value that "
            "holds spaces, brackets, quotes or = signs: key='value' (in a shell: \"key='value'\")."
        )
    if isinstance(error, MissingConfigException) and error.missing_cfg_file and error.options:
        group, _, name = error.missing_cfg_file.rpartition("/")
        return BriskError(f"{group}={name}: no such option. Choose one of: {', '.join(error.options)}.")
    if override := compat.ambiguous_override(error):
        key, _, value = override.partition("=")
        return BriskError(
            f"{override}: the comma makes this several values (a list, or a sweep under -m). For one value with a "
            f"comma in it, quote it: {key}='{value}' (in a shell: \"{key}='{value}'\"); for a list: {key}=[{value}]."
        )
    cause = error.__cause__ or error.__context__  # __context__: a value set inside a group's file
    if isinstance(cause, ConfigTypeError) and cause.full_key and "deletion" in str(cause):  # ~key of a schema
        key = cause.full_key
        return BriskError(
            f"~{key}: {key} is an argument every run gives (brisk.run.schemas), so it cannot be removed. Give it "
            f"another value instead: {key}=<value>.",
            key,
        )
    if isinstance(cause, ValidationError) and cause.full_key:  # a schema's type (brisk.run.schemas)
        key = cause.full_key
        given = next((o for o in reversed(overrides) if o.partition("=")[0].lstrip("+") == key), key)  # the last wins
        return BriskError(f"{given}: {first_line(cause.msg)}. Give {key} a value of that type.", key)
    if isinstance(cause, ConfigKeyError | ConfigAttributeError) and cause.full_key:
        key = cause.full_key
        where, _, leaf = key.rpartition(".")
        known = [str(k) for k in (cause.parent_node or {}) if k != "hydra"]
        given = next((o for o in overrides if o.partition("=")[0] == key), key)
        # callbacks.early_stopping.patience=2: a key of a group option that is not picked; hydra.launcher.n_jobs=2: a
        # key of a plugin's option (joblib's), whose schema is in Hydra's ConfigStore
        group, in_folders = where.replace(".", "/"), any((Path(f) / where / f"{leaf}.yaml").is_file() for f in folders)
        if picks := leaf if where.isidentifier() and in_folders else _stored_options(group, leaf):
            return BriskError(f"{given}: not in the config until its option is picked: add {group}={picks}.", key)
        hint = _did_you_mean(leaf, known, f"{where}." if where else "")
        # +key adds it, but only an entry without a schema takes a key its file does not list (a net of one's own):
        # a schema (brisk.run.schemas) has every argument of its constructor, and no code reads a new top-level key
        plus = where and OmegaConf.get_type(cause.parent_node) is dict
        if not hint and not plus:  # the keys there are all it can be
            hint = (
                f" (the keys {f'of {where}' if where else 'and groups at the top level'}: {', '.join(sorted(known))})"
            )
        add = f", or add a new key with +{given}" if plus else ""
        return BriskError(f"{given}: the config has no key {key}{hint}. Correct the name{add}.")
    extra = f" {first_line(cause)}" if isinstance(cause, OmegaConfBaseException) else ""
    return BriskError(_line(f"{error}{extra}"))
