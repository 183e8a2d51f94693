"""Whether a checkpoint can be resumed: a Lightning checkpoint, with finite training state, whose weights and optimizer
state fit the model and optimizer a config builds. Checked before anything is built, and imported only by a resume.

Lightning (2.6.6) finds a weight of another shape, a missing one, or an optimizer state of other groups only in
fit, inside load_state_dict, after the data and the trainer are built, and its traceback does not name the file.
Here the classifier is built as the run will build it (brisk.models.build: the same constructor, the config's
model, optimizer and scheduler), but on the meta device, so nothing is allocated or computed, with the classes
the checkpoint was trained on. What does not fit is named with its key and the file.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from brisk.errors import BriskError
from brisk.models.classifier import ImageClassifier
from brisk.registry import construct
from brisk.utils.config import plain

log = logging.getLogger("brisk")


# What Lightning's fit(ckpt_path=...) reads to resume (lightning 2.6.6 fails on a missing one with a KeyError).
RESUME_KEYS = (
    "pytorch-lightning_version",
    "state_dict",
    "optimizer_states",
    "lr_schedulers",
    "loops",
    "epoch",
    "global_step",
)


def resumable(checkpoint: Any, path: str | os.PathLike, ckpt_path: str) -> None:
    """Raise BriskError unless `checkpoint` (read from `path`, which `ckpt_path` named) is a Lightning checkpoint
    a run can resume from."""
    missing = [k for k in RESUME_KEYS if k not in checkpoint] if isinstance(checkpoint, dict) else RESUME_KEYS
    if not missing:
        return
    if not isinstance(checkpoint, dict):
        held = f"a {type(checkpoint).__name__}"
    elif checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        held = f"only {len(checkpoint)} tensors, as a model's state_dict does"
    else:
        held = f"no {', '.join(missing)}"
    where = "" if str(ckpt_path) == str(path) else f" ({path})"
    raise BriskError(
        f"ckpt_path={ckpt_path}{where}: not a Lightning checkpoint to resume from: it holds {held}. A brisk checkpoint "
        "holds the model's state_dict, the optimizer and LR scheduler states, the loop counters (epoch, global_step, "
        "loops) and the Lightning version: resume from one brisk-train wrote (<run>/checkpoints/last.ckpt), or "
        "start a new run without ckpt_path."
    )


# What a resume continues from: the weights, the optimizer's state and the callbacks' (a lookahead's slow copy).
TRAINING_STATE = ("state_dict", "optimizer_states", "callbacks")


def finite(ckpt: Path, checkpoint: dict[str, Any]) -> None:
    """Refuse a checkpoint whose training state holds NaN or Inf, naming its key path: Lightning would load it and
    train an epoch of NaN before the divergence guard stopped the run. NaN counts anywhere. Inf counts outside 0-d
    tensors only: a metric's running best starts at -inf (torchmetrics' MaxMetric), and ModelCheckpoint keeps an inf
    score for a slot not yet filled; a weight is never 0-d."""
    stack = [(key, checkpoint.get(key)) for key in reversed(TRAINING_STATE)]
    while stack:  # no recursion: run_files.shallow has bounded the depth, and a loop needs no stack frames
        where, node = stack.pop()
        if isinstance(node, torch.Tensor) and (node.is_floating_point() or node.is_complex()):
            what = "NaN" if torch.isnan(node).any() else "Inf" if node.ndim and torch.isinf(node).any() else None
            if what:
                raise BriskError(
                    f"{ckpt}: {where} holds {what}: not a checkpoint to resume from. Resume from an earlier one "
                    f"(in {ckpt.parent}), or start a new run without ckpt_path."
                )
        elif isinstance(node, dict):
            stack.extend((f"{where}[{k!r}]", v) for k, v in reversed(node.items()))
        elif isinstance(node, list | tuple):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(node))))


def built(cfg: DictConfig, class_names: list[str]) -> tuple[dict[str, torch.Size], list[list[torch.Size]]] | None:
    """The shapes of the state_dict, and of each optimizer group's parameters, of the model `cfg` builds for
    `class_names`; None where it cannot be built on the meta device (then Lightning's own load checks it)."""
    given = {"optimizer": cfg.optimizer, "scheduler": cfg.get("scheduler"), "class_names": class_names}
    try:
        with torch.device("meta"), warnings.catch_warnings():
            # A net that loads weights (model=timm model.net.weights=...) copies them into meta tensors: a no-op.
            warnings.filterwarnings("ignore", message=".*non-meta parameter in the checkpoint to a meta parameter")
            model = construct(ImageClassifier, "model", **plain(cfg.model), **given)
            answer = model.optimizers_for(lambda: 1, lambda interval: 1)  # only the groups are read, not the steps
    except BriskError:
        raise  # a value of the config itself: the build would refuse it the same way
    except Exception as e:  # a net that computes at construction cannot be built on meta: not a fault of the file
        log.debug("the resume's model could not be built on the meta device (%s): its shapes are left to Lightning", e)
        return None
    optimizer = answer["optimizer"] if isinstance(answer, dict) else answer
    groups = [[p.shape for p in g["params"]] for g in optimizer.param_groups]
    return {k: v.shape for k, v in model.state_dict().items()}, groups


def check(cfg: DictConfig, path: Any, checkpoint: dict) -> None:
    """Refuse (BriskError naming `path` and the key) a checkpoint whose weights or optimizer state the model `cfg`
    builds cannot load."""
    hparams = checkpoint.get("hyper_parameters")
    names = hparams.get("class_names") if isinstance(hparams, dict) else None
    if not isinstance(names, list) or not names:
        return  # not written by brisk's classifier: compare() and Lightning judge it
    shapes = built(cfg, [str(n) for n in names])
    if shapes is None:
        return
    weights, groups = shapes
    fix = "Resume from a checkpoint this run wrote, with the run's config, or start a new run without ckpt_path."
    if problem := _weights(weights, checkpoint.get("state_dict")) or _optimizer(groups, checkpoint):
        raise BriskError(f"{path}: {problem}: the model this config builds cannot load it. {fix}")


def _weights(expected: dict[str, torch.Size], held: Any) -> str | None:
    if not isinstance(held, dict):
        return "its state_dict is not a mapping of weights"
    for key, shape in expected.items():
        if key not in held:
            return f"model weight {key} is missing"
        tensor = held[key]
        if not isinstance(tensor, torch.Tensor) or tensor.shape != shape:
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            return f"model weight {key} has shape {got}, where the model has {tuple(shape)}"
    if extra := [k for k in held if k not in expected]:
        return f"it holds model weight {extra[0]}, which the model does not have"
    return None


def _optimizer(groups: list[list[torch.Size]], checkpoint: dict) -> str | None:
    """The saved optimizer state against the built optimizer's groups: their number, their sizes, and each state
    tensor that has a parameter's rank (a momentum, Adam's moments) against that parameter's shape."""
    states = checkpoint.get("optimizer_states")
    if not isinstance(states, list) or len(states) != 1 or not isinstance(states[0], dict):
        count = len(states) if isinstance(states, list) else type(states).__name__
        return f"it holds {count} optimizer states where the run has 1 optimizer"
    saved = states[0].get("param_groups")
    if not isinstance(saved, list) or len(saved) != len(groups):
        count = len(saved) if isinstance(saved, list) else type(saved).__name__
        return f"its optimizer state has {count} parameter groups, where the optimizer has {len(groups)}"
    for i, (group, params) in enumerate(zip(saved, groups, strict=True)):
        size = len(group.get("params", ())) if isinstance(group, dict) else None
        if size != len(params):
            return f"its optimizer group {i} holds {size} parameters, where the optimizer's holds {len(params)}"
    shapes = [shape for params in groups for shape in params]  # torch numbers the parameters in group order
    state = states[0].get("state")
    for index, entry in (state or {}).items() if isinstance(state, dict) else ():
        for name, tensor in entry.items() if isinstance(entry, dict) else ():
            if not isinstance(index, int) or not 0 <= index < len(shapes):
                return f"its optimizer state names parameter {index}, which the optimizer does not have"
            shape = shapes[index]
            if isinstance(tensor, torch.Tensor) and tensor.ndim == len(shape) and tensor.shape != shape:
                return (
                    f"its optimizer state {name} of parameter {index} has shape {tuple(tensor.shape)}, "
                    f"where the parameter has {tuple(shape)}"
                )
    return None
