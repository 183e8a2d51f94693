"""What a file may name: the exact `_target_`s a run's saved config or a checkpoint may hold, place by place.

A file's config is data. It may choose among what brisk's trusted config builds, and never name code: at
`model.net` only the nets that conf/model/ names, at `optimizer` only conf/optimizer/'s, at `data` only
conf/data/'s DataModules, and so on, plus the classes the command's own composed config (conf/, the command
line, the user's config folders) puts at that very place. Anywhere else a `_target_` is refused: Hydra's
instantiate recurses into nested ones, and packages hold functions that remove or write the paths they are
given (lightning's `ModelCheckpoint._link_checkpoint` deletes whatever folder it is handed). A file's name is
compared as a string, so nothing it names is imported to be checked. conf/'s entries are brisk's own code:
classes, and the factories its option files build with (cifar_resnet18, cosine_with_warmup, exp_decay, warmup_linear).

Hydra's other keys (`_args_`, `_partial_`, `_convert_`, `_recursive_`) are refused in file content except where
conf/ puts the same key with the same value (`_partial_: true` of the optimizer and the scheduler, which the
classifier calls later with its parameters). So are interpolations: resolving one runs a resolver, and a run's
saved config is written resolved.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.utils import get_class
from omegaconf import DictConfig, ListConfig, OmegaConf

from brisk.conf import CONFIG_PATH
from brisk.errors import BriskError
from brisk.utils.config import nodes

# What a run's files say about the model and the data it trained on; nothing else is ever taken from them.
RUN_SECTIONS = ("data", "model", "optimizer", "scheduler")
HYDRA_KEYS = ("_args_", "_partial_", "_convert_", "_recursive_")
FIX = "Use a run directory and checkpoint written by brisk-train"
# Where earlier versions of brisk kept these, and so what their runs' files name: read as the names they have now
# (a string for a string: nothing is imported), so those runs still evaluate, predict, export and resume.
MOVED = {
    "brisk.models.muon.MuonWithAdamW": "brisk.optim.MuonWithAdamW",
    "brisk.models.schedules.cosine_with_warmup": "brisk.optim.cosine_with_warmup",
    "brisk.models.schedules.exp_decay": "brisk.optim.exp_decay",
}


def current_names(content: Any) -> Any:
    """Plain file content with each `_target_` that names a moved class renamed to where it is now, in place."""
    for _, node in nodes(content):
        if isinstance(node, dict) and isinstance(name := node.get("_target_"), str) and name in MOVED:
            node["_target_"] = MOVED[name]
    return content


def _package(relative: Path, text: str) -> str:
    """Where Hydra puts a conf/ file's content: its `# @package` header, else its group (the folder path)."""
    group = ".".join(relative.parent.parts)
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            break  # the header is the comment block the file starts with
        words = line.lstrip("#").split()
        if len(words) == 2 and words[0] == "@package":
            return "" if words[1] == "_global_" else words[1].replace("_group_", group)
    return group


def _in_run_sections(place: str) -> bool:
    return place.split(".")[0].split("[")[0] in RUN_SECTIONS


@dataclass(frozen=True)
class Shipped:
    """What the shipped conf/ tree builds in the run sections: the `_target_`s at each place, and the Hydra keys
    (with their values) it sets there."""

    targets: Mapping[str, frozenset[str]]
    hydra_keys: Mapping[str, frozenset[tuple[str, Any]]]


@functools.cache  # conf/ is part of the installed program: read once per process
def shipped() -> Shipped:
    targets: dict[str, set[str]] = {}
    hydra_keys: dict[str, set[tuple[str, Any]]] = {}
    conf = Path(CONFIG_PATH)
    for path in sorted(conf.rglob("*.yaml")):
        text = path.read_text()
        content = yaml.safe_load(text)
        for place, node in nodes(content, _package(path.relative_to(conf), text)):
            if not (isinstance(node, dict) and _in_run_sections(place)):
                continue
            if isinstance(node.get("_target_"), str):
                targets.setdefault(place, set()).add(node["_target_"])
            for key in HYDRA_KEYS:
                if type(node.get(key)) in (bool, str):
                    hydra_keys.setdefault(place, set()).add((key, node[key]))
    return Shipped({k: frozenset(v) for k, v in targets.items()}, {k: frozenset(v) for k, v in hydra_keys.items()})


def _is_class(name: str) -> bool:
    """Whether a trusted config's dotted name is a class (importing it: the command's own config named it)."""
    try:
        return isinstance(get_class(name), type)
    except (ImportError, ValueError, AttributeError):
        return False


def _as_conf_sets(place: str, key: str, value: Any) -> bool:
    """Whether conf/ sets Hydra's `key` at `place` to this very value (a bool or a string, never 1 for true)."""
    return type(value) in (bool, str) and (key, value) in shipped().hydra_keys.get(place, frozenset())


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _refused(message: str) -> BriskError:
    """The error as one line, whatever a file's keys and values hold."""
    return BriskError(message.replace("\r", "\\r").replace("\n", "\\n"))


@dataclass(frozen=True)
class Registry:
    """The exact names a file may give each place: conf/'s, and the one the command's trusted config puts there
    if it is a class."""

    trusted: Mapping[str, str]

    @classmethod
    def of(cls, cfg: DictConfig | None) -> Registry:
        """The registry for a command whose composed (trusted) config is `cfg`."""
        found = {}
        for section in RUN_SECTIONS:
            node = cfg.get(section) if cfg is not None else None
            if isinstance(node, DictConfig | ListConfig):
                node = OmegaConf.to_container(node, resolve=False)
            for place, mapping in nodes(node, section):
                if isinstance(mapping, dict) and isinstance(mapping.get("_target_"), str):
                    found[place] = mapping["_target_"]
        return cls(found)

    def check(self, content: Mapping[str, Any], source: str) -> None:
        """Refuse (BriskError naming `source` and the key) the first thing in a file's run sections, given as
        plain containers, that would make instantiate call anything but an exact entry for its place."""
        for place, node in nodes(dict(content)):
            if isinstance(node, str) and "${" in node:
                raise _refused(
                    f"{source}: refused {place}={_short(node)}: an interpolation, which runs a resolver when read, "
                    f"and a run config brisk writes is resolved. {FIX}, or give {place} on the command line."
                )
            if not isinstance(node, dict):
                continue
            if "_target_" in node:
                self._check_target(place, node["_target_"], source)
            for key in HYDRA_KEYS:
                if key in node and not _as_conf_sets(place, key, node[key]):
                    raise _refused(
                        f"{source}: refused {place}.{key}={_short(node[key])}: Hydra's {key} changes what is called "
                        f"and how, and a run's files may hold it only where and as brisk's conf/ does. {FIX}."
                    )

    def _check_target(self, place: str, name: Any, source: str) -> None:
        refused = f"{source}: refused {place}._target_={_short(name)}"
        own = shipped().targets.get(place, frozenset())
        trusted = self.trusted.get(place)
        if isinstance(name, str) and (name in own or (name == trusted and _is_class(name))):
            return
        if name == trusted:
            raise _refused(
                f"{refused}: this command's config names it there too, but it is not a class, and a file may "
                f"only name classes. Give ++{place}._target_={name} on the command line if you trust it."
            )
        names = sorted(own | ({trusted} if trusted and _is_class(trusted) else set()))
        places = ", ".join(sorted(shipped().targets))
        where = (
            f"at {place} a run's files may name only {', '.join(names)}"
            if names
            else f"a run's files may name a class only where brisk builds one ({places}), and {place} is not one"
        )
        raise _refused(
            f"{refused}: {where}. {FIX}, or, if you trust that class, name it yourself on the command line "
            f"(++{place}._target_=...)."
        )
