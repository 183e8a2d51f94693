"""Using a trained checkpoint (eval, predict, export): the one safe way to get a model out of a file.

A checkpoint and a run's saved `.hydra/config.yaml` are data. Neither may decide what is called: the model is
built by the builder, which picks every class by its registered name (brisk.registry), and only the state_dict
(tensors, read with weights_only=True) comes from the checkpoint. A file's config is checked before anything is
built: every `type` at a place brisk builds must be a registered name there, and Hydra's keys (`_target_`,
`_partial_`, `_args_`, ...), `imports` and interpolations are refused at any depth, in one line naming the file.

The config: the trusted one (conf/ + command line), with the sections that say what the run trained
(data, model, optimizer, scheduler) taken from the run's saved config, except the keys the command
line sets, which keep the value it composed to. Without a saved run config the model comes from the
checkpoint's hyperparameters (checked the same way), and the data from the command line, with a warning.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from brisk.checkpoints import io
from brisk.checkpoints.io import SafeCheckpointIO, peek
from brisk.checkpoints.legacy import renamed
from brisk.checkpoints.paths import run_dir_of
from brisk.errors import BriskError, first_line
from brisk.models.build import build_model
from brisk.registry import AUGMENTS, SINGLE, Registry
from brisk.utils import run_files
from brisk.utils.config import nodes

log = logging.getLogger("brisk")

# What a run's files say about the model and the data it trained on; nothing else is ever taken from them.
RUN_SECTIONS = ("data", "model", "optimizer", "scheduler")
# Keys that would make something be imported or called: never in a file's content, at any depth.
REFUSED_KEYS = ("_target_", "_partial_", "_args_", "_convert_", "_recursive_", "imports")
FIX = "Use a run directory and checkpoint written by brisk-train"


def _first_line(e: Exception) -> str:
    """An exception as one line: OmegaConf's messages add lines of context."""
    return f"{type(e).__name__}: {first_line(e)}"


def _short(value: Any) -> str:
    text = str(value).replace("\r", "\\r").replace("\n", "\\n")  # one line, whatever a file holds
    return text if len(text) <= 80 else f"{text[:77]}..."


def run_config(ckpt_path: str | Path) -> dict[str, Any] | None:
    """The saved config of the run that wrote `ckpt_path` (<run>/.hydra/config.yaml) as plain data, None if absent:
    read by brisk.utils.run_files (no aliases, bounded), and never an OmegaConf node, so no interpolation in it is
    ever resolved. An earlier brisk's code paths read as the names they have now (brisk.checkpoints.legacy)."""
    path = run_dir_of(ckpt_path) / ".hydra" / "config.yaml"
    if not os.path.lexists(path):  # a FIFO or a dangling link is there: run_files refuses it in one line
        return None
    cfg = run_files.load_yaml(path, "a run config")
    if not isinstance(cfg, dict):
        raise BriskError(f"{path}: not a run config (a mapping of config keys). Restore it from the run, or delete it.")
    return renamed(cfg)


def check(content: dict[str, Any], source: str) -> None:
    """Refuse (BriskError naming `source` and the key) anything in a file's plain run sections `content` that
    would make brisk import or call what the file names, or that names no registered class where one is built."""
    for place, node in nodes(content):
        if isinstance(node, str) and "${" in node:
            raise BriskError(
                f"{source}: refused {place}={_short(node)}: an interpolation, which runs a resolver when read, "
                f"and a run config brisk writes is resolved. {FIX}, or give {place} on the command line."
            )
        for key in REFUSED_KEYS if isinstance(node, dict) else ():
            if key in node:
                where = f"{place}.{key}" if place else key
                raise BriskError(
                    f"{source}: refused {where}={_short(node[key])}: a run's files pick classes by registered name "
                    f"(`type`) only, and nothing is imported or called because a file says so. {FIX}."
                )
    for registry in SINGLE:
        place, node = registry.key, content
        for part in place.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue  # not in the file (the command's config gives it), or scheduler=none
        _registered(registry, node.get("type") if isinstance(node, dict) else None, f"{place}.type", source)
    data = content.get("data")
    for op in (data.get("augment") or {}) if isinstance(data, dict) else ():
        _registered(AUGMENTS, op, f"data.augment.{op}", source)


def _registered(registry: Registry, name: Any, where: str, source: str) -> None:
    if not (isinstance(name, str) and name in registry):
        shown = where if where.endswith(f".{name}") else f"{where}={_short(name)}"
        raise BriskError(
            f"{source}: refused {shown}: no {registry.kind} is registered under that name (one of: "
            f"{', '.join(registry.names())}). If it is your own, name its module on the command line: "
            "imports=[<your module>]."
        )


def _override_key(override: str) -> str:
    """`+data.x=1` -> `data.x`, `data=synthetic` -> `data`, `~model.l1` -> `model.l1`."""
    return override.partition("=")[0].lstrip("+~").partition("@")[0]


def _drop(sections: dict[str, Any], key: str) -> None:
    """Remove a dotted key from plain sections, where it is there: the command line gives it instead."""
    *parents, leaf = key.split(".")
    node = sections
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def _from_checkpoint_hparams(ckpt_path: Path) -> dict[str, Any]:
    """Without a saved run config: the model sections from the checkpoint's hyperparameters (plain values)."""
    checkpoint = peek(ckpt_path)  # any object torch's safe loader allows: a bare tensor too
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict) or "net" not in hparams:
        raise BriskError(
            f"{ckpt_path}: has no model hyperparameters and its run's .hydra/config.yaml is missing. "
            "Evaluate a checkpoint inside the run directory brisk-train wrote."
        )
    hparams = dict(hparams)
    hparams.pop("class_names", None)  # the builder takes them from the DataModule, as for any model
    optimizer, scheduler = hparams.pop("optimizer", None), hparams.pop("scheduler", None)
    return {"model": hparams, "optimizer": optimizer, "scheduler": scheduler}


def with_run_config(cfg: DictConfig, ckpt_path: str | Path, overrides: Iterable[str] = ()) -> DictConfig:
    """The trusted `cfg` with what the checkpoint's run trained (data, model, optimizer, scheduler) taken from the
    run's saved config, checked against the registry, and the command-line `overrides` still winning."""
    ckpt_path = Path(ckpt_path)
    saved = run_config(ckpt_path)
    if saved is not None:
        source = str(run_dir_of(ckpt_path) / ".hydra" / "config.yaml")
        # Plain data: an interpolation stays a string, which `check` refuses, and no resolver runs.
        written = saved
        sections = {key: written[key] for key in RUN_SECTIONS if key in written}
        if "imports" in written:  # brisk writes a run's record without it: a file never says what to import
            check({"imports": written["imports"]}, source)
    else:
        source = f"{ckpt_path} (hyper_parameters)"
        sections = _from_checkpoint_hparams(ckpt_path)
        log.warning(
            "%s not found: the model is rebuilt from the checkpoint's hyperparameters, and the data is data=%s "
            "from this command's config, not necessarily what the run trained on.",
            run_dir_of(ckpt_path) / ".hydra" / "config.yaml",
            OmegaConf.select(cfg, "data.type"),
        )
    if not isinstance(sections.get("model"), dict) or "net" not in sections["model"]:
        raise BriskError(
            f"{source}: names no model.net, so there is no model to rebuild. Use a brisk-train run's files."
        )
    renamed(sections)
    check(sections, source)  # the whole file as written, before the command line takes its keys out
    for override in overrides:
        _drop(sections, _override_key(override))
    optimizer = sections.get("optimizer")
    if isinstance(optimizer, dict) and "weight_decay" in optimizer:
        # Older runs could set it; the classifier's parameter groups always overrode it, so they trained without.
        log.warning(
            "%s: optimizer.weight_decay=%s left out: it never applied (model.weight_decay is the weight decay).",
            source,
            optimizer.pop("weight_decay"),
        )
    if saved is None and "model" in sections:
        # The hyperparameters are the classifier's arguments, over this command's model section.
        sections["model"] = {**OmegaConf.to_container(cfg.get("model") or {}, resolve=True), **sections["model"]}
    merged = copy.deepcopy(cfg)
    try:
        with open_dict(merged):
            for key, value in sections.items():
                merged[key] = value
    except OmegaConfBaseException as e:  # a checkpoint's hyperparameters may hold what a config cannot
        raise BriskError(
            f"{source}: cannot be used as a config ({_first_line(e)}). Use a brisk-train run's files."
        ) from None
    with open_dict(merged):
        for override in overrides:  # the command line wins, with the value it composed to (a ~key is dropped above)
            key = _override_key(override)
            if key.split(".")[0] in sections and not override.startswith("~"):
                given = OmegaConf.select(cfg, key, throw_on_missing=True)  # key=??? is refused, naming the key
                OmegaConf.update(merged, key, given, merge=False, force_add=True)
    return merged


def load_model(cfg: DictConfig, ckpt_path: str | Path) -> L.LightningModule:
    """The model the builder makes from `cfg` (see `with_run_config`), with the checkpoint's weights in it."""
    return load(cfg, ckpt_path)[0]


def load(cfg: DictConfig, ckpt_path: str | Path) -> tuple[L.LightningModule, dict]:
    """`load_model`, and the checkpoint it read (tensors and plain values), for what else it holds."""
    model = build_model(cfg)
    checkpoint = SafeCheckpointIO().load_checkpoint(ckpt_path, map_location="cpu")
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise BriskError(f"{ckpt_path}: holds no state_dict: not a checkpoint brisk-train wrote.")
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        first = (str(e).splitlines()[1:] or [str(e)])[0].strip()  # the first mismatch, under a heading line
        raise BriskError(
            f"{ckpt_path}: its weights do not fit model.net.type={OmegaConf.select(cfg, 'model.net.type')} "
            f"({first[:300]}). Evaluate it with the model its run trained."
        ) from None
    model.on_load_checkpoint(checkpoint)  # what load_from_checkpoint would call, with data only
    return model.eval(), checkpoint


def load_run(cfg: DictConfig) -> tuple[DictConfig, L.LightningModule, dict]:
    """The run's config (its saved .hydra/config.yaml, then the command line), its model with the checkpoint's
    weights, and the checkpoint, for the commands that need the run's data too (predict, export): no fallback
    without the run's config. Compiling is off: these run the eager net."""
    ckpt = Path(cfg.ckpt_path)
    if os.path.lexists(ckpt):  # a run directory is named as such; a missing file, as torch.load finds it
        io.regular_checkpoint(ckpt)
    if run_config(ckpt) is None:
        saved = run_dir_of(ckpt) / ".hydra" / "config.yaml"
        raise BriskError(
            f"ckpt_path={ckpt}: its run's config {saved} is missing, so the net and data are unknown. "
            "Pass a checkpoint inside a brisk run directory, <run>/checkpoints/<name>.ckpt."
        )
    overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else ()
    run_cfg = with_run_config(cfg, ckpt, overrides)
    with open_dict(run_cfg):
        run_cfg.model.compile = False
    model, checkpoint = load(run_cfg, ckpt)
    return run_cfg, model, checkpoint
