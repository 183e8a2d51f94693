"""Using a trained checkpoint (eval, predict, export): the one safe way to get a model out of a file.

A checkpoint and a run's saved `.hydra/config.yaml` are data. Neither may decide what is called:
lightning's `load_from_checkpoint` passes the file's hyperparameters to `__init__`, and brisk's
classifier instantiates the `net` config it is given, so a crafted checkpoint with
`hyper_parameters.net = {_target_: builtins.open, ...}` would truncate any file. Here the model is
built by the builder from a config whose every `_target_` taken from a file is on an allowlist, and
only the state_dict (tensors, read with weights_only=True) comes from the checkpoint.

The config: the trusted one (conf/ + command line), with the sections that say what the run trained
(data, model, optimizer, scheduler) taken from the run's saved config, then the command line's keys
in those sections put back, so they still win. Without a saved run config the model comes from the
checkpoint's hyperparameters (allowlisted too), and the data from the command line, with a warning.
"""

from __future__ import annotations

import copy
import functools
import importlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from brisk.builder import build_model
from brisk.checkpoint_io import SafeCheckpointIO, peek
from brisk.cli import CONFIG_PATH
from brisk.errors import BriskError

log = logging.getLogger("brisk")

# What a run's config says about the model and the data it trained on; everything else (trainer,
# callbacks, logger, paths) is the current command's business.
RUN_SECTIONS = ("data", "model", "optimizer", "scheduler")
# A target from a file passes if it is a class or function defined under one of these packages...
ALLOWED_PACKAGES = (
    "brisk.models",
    "brisk.callbacks",
    "torch.optim",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.loggers",
)
# ...or if the shipped conf/ tree or the user's own config names it. Not all of `brisk.`: e.g.
# brisk.data.synthetic.write writes files wherever its arguments say.


def run_dir_of(ckpt_path: str | Path) -> Path:
    """The run directory of a checkpoint: <run>/checkpoints/x.ckpt, or <run>/hpc_ckpt_N.ckpt (SLURM)."""
    ckpt = Path(ckpt_path).absolute()
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent


def _first_line(e: Exception) -> str:
    """An exception as one line: OmegaConf's messages add lines of context."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


def run_config(ckpt_path: str | Path) -> DictConfig | None:
    """The saved config of the run that wrote `ckpt_path` (<run>/.hydra/config.yaml), read as data; None if absent.

    Nothing in it is instantiated here: `with_run_config` checks its targets before anything is built."""
    path = run_dir_of(ckpt_path) / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    try:
        cfg = OmegaConf.load(path)  # yaml's safe loader: plain values only
    except (OSError, yaml.YAMLError, OmegaConfBaseException) as e:
        raise BriskError(f"{path}: cannot be read as a run config ({_first_line(e)}).") from None
    if not isinstance(cfg, DictConfig):
        raise BriskError(f"{path}: not a run config (a mapping of config keys). Restore it from the run, or delete it.")
    return cfg


def targets(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(key, _target_) for every `_target_` in a nested config, lists included."""
    if isinstance(node, DictConfig | dict):
        items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else node.items()
        for key, value in items:
            key = f"{where}.{key}" if where else str(key)
            if str(key).endswith("_target_"):
                yield key, str(value)
            else:
                yield from targets(value, key)
    elif isinstance(node, ListConfig | list):
        for i, value in enumerate(node):
            yield from targets(value, f"{where}[{i}]")


@functools.cache
def shipped_targets() -> frozenset[str]:
    """Every `_target_` named in the shipped conf/ tree."""
    found = set()
    for path in Path(CONFIG_PATH).rglob("*.yaml"):
        found |= {t for _, t in targets(yaml.safe_load(path.read_text()) or {})}
    return frozenset(found)


def _locate(target: str) -> Any:
    """The object a dotted path names (the longest importable module, then attributes), or None."""
    parts = target.split(".")
    for n in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for name in parts[n:]:
            obj = getattr(obj, name, None)
        return obj
    return None


def _in_allowed_package(target: str) -> bool:
    if not target.startswith(tuple(f"{p}." for p in ALLOWED_PACKAGES)):
        return False  # nothing is imported for a target outside the packages
    obj = _locate(target)
    # The object itself must live there: brisk.models.classifier.torch.save is reachable by that path, but is torch's.
    module = getattr(obj, "__module__", None) or ""
    is_code = isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__"))
    return is_code and any(module == p or module.startswith(f"{p}.") for p in ALLOWED_PACKAGES)


def check_targets(node: Any, source: str, trusted: DictConfig | None = None) -> None:
    """Refuse the first `_target_` in `node` (read from `source`) that is not on the allowlist."""
    allowed = shipped_targets() | {t for _, t in targets(trusted or {})}
    for key, target in targets(node):
        if target not in allowed and not _in_allowed_package(target):
            raise BriskError(
                f"{source}: refused {key}={target}: a file may only name brisk's nets, optimizers, schedulers and "
                "modules or the classes of conf/. Use a checkpoint and run directory written by brisk-train, or "
                "name the class yourself on the command line if you trust it."
            )


def _section(saved: DictConfig, key: str, source: str) -> Any:
    """A section of a saved config as plain containers, interpolations resolved within that config."""
    try:
        return OmegaConf.to_container(saved[key], resolve=True) if key in saved else None
    except OmegaConfBaseException as e:
        raise BriskError(f"{source}: {key} cannot be resolved ({_first_line(e)}).") from None


def _override_key(override: str) -> str:
    """`+data.x=1` -> `data.x`, `data=synthetic` -> `data`, `~model.l1` -> `model.l1`."""
    return override.partition("=")[0].lstrip("+~").partition("@")[0]


def _from_checkpoint_hparams(cfg: DictConfig, ckpt_path: Path) -> dict[str, Any]:
    """Without a saved run config: the model sections from the checkpoint's hyperparameters (plain values)."""
    hparams = peek(ckpt_path).get("hyper_parameters")
    if not isinstance(hparams, dict) or "net" not in hparams:
        raise BriskError(
            f"{ckpt_path}: has no model hyperparameters and its run's .hydra/config.yaml is missing. "
            "Evaluate a checkpoint inside the run directory brisk-train wrote."
        )
    hparams = dict(hparams)
    optimizer, scheduler = hparams.pop("optimizer", None), hparams.pop("scheduler", None)
    model = {**OmegaConf.to_container(cfg.get("model") or {}, resolve=True), **hparams}
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler}


def with_run_config(cfg: DictConfig, ckpt_path: str | Path, overrides: Iterable[str] = ()) -> DictConfig:
    """The trusted `cfg` with what the checkpoint's run trained (data, model, optimizer, scheduler) taken from the
    run's saved config, every file-given `_target_` allowlisted, and the command-line `overrides` still winning."""
    ckpt_path = Path(ckpt_path)
    saved = run_config(ckpt_path)
    if saved is not None:
        source = str(run_dir_of(ckpt_path) / ".hydra" / "config.yaml")
        sections = {key: _section(saved, key, source) for key in RUN_SECTIONS if key in saved}
    else:
        source = f"{ckpt_path} (hyper_parameters)"
        sections = _from_checkpoint_hparams(cfg, ckpt_path)
        log.warning(
            "%s not found: the model is rebuilt from the checkpoint's hyperparameters, and the data is data=%s "
            "from this command's config, not necessarily what the run trained on.",
            run_dir_of(ckpt_path) / ".hydra" / "config.yaml",
            OmegaConf.select(cfg, "data._target_"),
        )
    if not isinstance(sections.get("model"), dict) or "net" not in sections["model"]:
        raise BriskError(
            f"{source}: names no model.net, so there is no model to rebuild. Use a brisk-train run's files."
        )
    check_targets(sections, source, trusted=cfg)
    merged = copy.deepcopy(cfg)
    with open_dict(merged):
        for key, value in sections.items():
            merged[key] = value
        for override in overrides:  # the command line wins, with the value it composed to
            key = _override_key(override)
            parent, _, leaf = key.rpartition(".")
            if key.split(".")[0] not in sections:
                continue
            if override.startswith("~"):
                node = OmegaConf.select(merged, parent) if parent else merged
                if isinstance(node, DictConfig):
                    node.pop(leaf, None)
            else:
                OmegaConf.update(merged, key, OmegaConf.select(cfg, key), merge=False, force_add=True)
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
            f"{ckpt_path}: its weights do not fit model.net={OmegaConf.select(cfg, 'model.net._target_')} "
            f"({first[:300]}). Evaluate it with the model its run trained."
        ) from None
    model.on_load_checkpoint(checkpoint)  # what load_from_checkpoint would call, with data only
    return model.eval(), checkpoint


def load_run(cfg: DictConfig) -> tuple[DictConfig, L.LightningModule, dict]:
    """The run's config (its saved .hydra/config.yaml, then the command line), its model with the checkpoint's
    weights, and the checkpoint, for the commands that need the run's data too (predict, export): no fallback
    without the run's config. Compiling is off: these run the eager net."""
    ckpt = Path(cfg.ckpt_path)
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
