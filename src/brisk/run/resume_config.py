"""A resume's config against its run's: what the checkpoint cannot continue is refused, what it can is said, and
a finished run is found. Imported only when a run resumes from a checkpoint (brisk.run.resume).

Without this, a changed config fails late or not at all (lightning 2.6.6, torch 2.14): another net
ends in a state_dict traceback; more epochs, or a smaller batch, make OneCycleLR raise "Tried to step
N times" partway through, because the restored scheduler keeps the old total; a larger batch ends
the schedule early without a word; and resuming a finished run rewrites its summary.json with
images/s 0.0. The saved config is the run's `.hydra/config.yaml` (read as data, never instantiated);
the model is also compared with the checkpoint's own hyperparameters, since its weights must fit.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from brisk.checkpoints import paths
from brisk.errors import BriskError
from brisk.optim import schedules
from brisk.utils import run_files

log = logging.getLogger("brisk")

# What the weights must fit: another value means another model.
MODEL_KEYS = ("model.net",)
# Whose optimizer and scheduler state the checkpoint holds.
STATE_KEYS = ("optimizer.type", "scheduler.type")
# What makes a run this run and no other: the seed orders every epoch's batches (brisk.data.base), so a resume
# under another seed continues no run, while the run's record goes on naming its own.
IDENTITY_KEYS = ("seed",)
# What sets the number of optimizer steps: a planned schedule (OneCycle, cosine) cannot follow a change.
HORIZON_KEYS = (
    "trainer.max_epochs",
    "trainer.max_steps",
    "trainer.limit_train_batches",
    "trainer.accumulate_grad_batches",
    "callbacks.accumulation",
)
# How and where it runs: a resume may change them (a run moved to a GPU, to more devices or another precision), and
# the warning says so, since the numbers of the resumed part come out differently. The global batch stays the same.
RUNTIME_KEYS = ("trainer.accelerator", "trainer.devices", "trainer.num_nodes", "trainer.strategy", "trainer.precision")
# data keys that do not change the training batches, so they never count as a change of the run.
DATA_KEYS_IGNORED = ("eval_batch_size", "channels_last", "download")


def _value(cfg: DictConfig | dict, key: str) -> Any:
    """cfg[key] as a plain value. This command's config (a DictConfig) is resolved where it can be. What was read
    from a file (a run's saved config, a checkpoint's hyperparameters: plain dicts) is taken as written, never put
    in an OmegaConf node: a `${oc.env:SECRET}` in it stays that string, so no resolver runs and no value of it is
    printed. Tuples compare as the lists a config holds."""
    if isinstance(cfg, dict):
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return _lists(node)
    node = OmegaConf.select(cfg, key, default=None)
    if isinstance(node, DictConfig | ListConfig):
        try:
            return OmegaConf.to_container(node, resolve=True)
        except OmegaConfBaseException:
            return OmegaConf.to_container(node, resolve=False)
    return node


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return [_lists(v) for v in value] if isinstance(value, list | tuple) else value


def _keys(saved: DictConfig | dict, new: DictConfig, section: str, ignored=()) -> list[str]:
    """The keys of a section in either config, as dotted names."""
    keys = {k for c in (saved, new) if isinstance(s := c.get(section), dict | DictConfig) for k in s}
    return [f"{section}.{k}" for k in sorted(map(str, keys)) if k not in ignored]


def _changes(before: DictConfig | dict, after: DictConfig, keys) -> list[tuple[str, Any, Any]]:
    return [(k, a, b) for k in keys if (a := _value(before, k)) != (b := _value(after, k))]


def _say(changes: list[tuple[str, Any, Any]]) -> str:
    return "; ".join(f"{k}: {a} -> {b}" for k, a, b in changes)


def compare(cfg: DictConfig, ckpt: Path, checkpoint: dict) -> str | None:
    """Refuse a resume whose config the checkpoint cannot continue; say the changes it can (logged once every check
    has passed: a log line opens the run's train.log, and a refused resume leaves its run as it was)."""
    from brisk.checkpoints import restore
    from brisk.checkpoints.legacy import renamed

    hparams = checkpoint.get("hyper_parameters")
    hparams = hparams if isinstance(hparams, dict) else {}
    from_ckpt = renamed({"model": {"net": copy.deepcopy(hparams.get("net"))}})  # an earlier brisk's code paths
    model = _changes(from_ckpt, cfg, MODEL_KEYS) if "net" in hparams else []
    saved = restore.run_config(ckpt)
    if saved is None:
        log.warning("%s: no saved run config beside it, so this resume is not compared with the run's config", ckpt)
    else:
        model = model or _changes(saved, cfg, MODEL_KEYS)
    fix = "Resume with the run's values (drop those overrides), or start a new run without ckpt_path."
    if model:
        raise BriskError(f"ckpt_path={ckpt}: a checkpoint resumes only the model it trained ({_say(model)}). {fix}")
    if saved is None:
        return None
    if identity := _changes(saved, cfg, IDENTITY_KEYS):
        raise BriskError(
            f"ckpt_path={ckpt}: a resume continues its run, which has another seed ({_say(identity)}), and its "
            f"record in {paths.run_dir_of(ckpt)} would go on naming that one. {fix}"
        )
    if state := _changes(saved, cfg, STATE_KEYS):
        raise BriskError(
            f"ckpt_path={ckpt}: it holds the state of the run's optimizer and scheduler ({_say(state)}). {fix}"
        )
    horizon = _changes(saved, cfg, [*HORIZON_KEYS, *_keys(saved, cfg, "data", DATA_KEYS_IGNORED)])
    scheduler = cfg.get("scheduler")
    if horizon and schedules.planned(scheduler):
        raise BriskError(
            f"ckpt_path={ckpt}: scheduler {scheduler.type} planned its whole course over the "
            f"run's optimizer steps and cannot be stretched, and this changes them ({_say(horizon)}). {fix} "
            "(scheduler=none, step or exp_decay can be resumed for more epochs.)"
        )
    if other := horizon + _changes(
        saved, cfg, [*(k for s in ("model", "optimizer", "scheduler") for k in _keys(saved, cfg, s)), *RUNTIME_KEYS]
    ):
        return (
            f"resuming with changes since the run: {_say(other)}. The optimizer and scheduler state, learning rate "
            "included, comes from the checkpoint."
        )
    return None


def finished(cfg: DictConfig, run_dir: Path, checkpoint: dict) -> dict | None:
    """The run's summary if the checkpoint is where the run ended and the new limits ask for no more training."""
    if not os.path.lexists(run_dir / "summary.json"):
        return None
    summary = run_files.load_json(run_dir / "summary.json")  # bounded; a FIFO or a link to /dev/zero is refused
    if not isinstance(summary, dict) or summary.get("global_step") != checkpoint.get("global_step"):
        return None  # not the end of a finished run: resuming from an earlier checkpoint trains again
    max_epochs, max_steps = cfg.trainer.get("max_epochs"), cfg.trainer.get("max_steps", -1)
    if max_epochs is None:  # Lightning's default: 1000 epochs unless max_steps is set
        max_epochs = 1000 if max_steps in (None, -1) else -1
    steps_done = max_steps not in (None, -1) and summary["global_step"] >= max_steps
    epochs_done = max_epochs != -1 and summary.get("epochs", 0) >= max_epochs
    return summary if steps_done or epochs_done else None
