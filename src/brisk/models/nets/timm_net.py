"""TimmNet: any timm model by name, its classifier head sized for the data, optionally from pretrained weights.

The name is data: it must be an architecture timm registers (`timm.list_models()`), with an optional pretrained
tag (`resnet18.a1_in1k`). Hub names (`hf-hub:...`, `local-dir:...`, `timm/...`) are refused: timm would download
or read a folder's config for them. Weights come from a local file or from a cache already filled; nothing is
downloaded, and a file is read as tensors only (safetensors, or torch.load with weights_only=True).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from brisk.errors import BriskError, first_line
from brisk.registry import NETS

FIX = "pass model.net.weights=<a state_dict file saved with torch.save or safetensors>"


def _timm():
    try:
        import timm
    except ImportError:
        raise BriskError("model=timm needs the timm package: pip install -e '.[timm]'.") from None
    return timm


def check_name(timm, name) -> None:
    """Refuse (one line) a name that is not a timm architecture, with or without a pretrained tag."""
    if isinstance(name, str) and name and not any(c in name for c in ":/\\") and timm.is_model(name):
        return
    hub = isinstance(name, str) and (":" in name or "/" in name)
    why = (
        "a hub name, which timm would download or read from a folder; brisk builds only names timm registers"
        if hub
        else "not a model timm registers (timm.list_models())"
    )
    close = difflib.get_close_matches(str(name), timm.list_models(), n=3) if not hub else []
    hint = f" Close: {', '.join(close)}." if close else ""
    raise BriskError(f"model.net.name={name}: {why}.{hint} Give an architecture name, and {FIX} for its weights.")


def cached_weights(cfg: Mapping, name: str) -> Path:
    """The file of timm's pretrained weights for `cfg` in the Hugging Face or torch hub cache; never downloads."""
    if hub_id := cfg.get("hf_hub_id"):
        from huggingface_hub import try_to_load_from_cache

        for filename in (cfg.get("hf_hub_filename"), "model.safetensors", "pytorch_model.bin"):
            found = try_to_load_from_cache(hub_id, filename) if filename else None
            if isinstance(found, str):
                return Path(found)
    if url := cfg.get("url"):
        found = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)
        if found.is_file():
            return found
    where = f"hf-hub {hub_id}" if hub_id else (url or "no source timm knows")
    raise BriskError(
        f"model.net.pretrained=true: timm's weights for {name} ({where}) are not in the local cache, and brisk "
        f"downloads nothing: {FIX}, or fill the cache on a machine with network (timm.create_model('{name}', "
        "pretrained=True))."
    )


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, read as data by timm's own reader: safetensors, or torch.load with
    weights_only=True."""
    if not path.is_file():
        raise BriskError(
            f"model.net.weights={path}: no such file. Give the path of a state_dict file, or "
            "null (brisk-eval, -predict and -export take a trained run's weights from its checkpoint: add "
            "+model.net.weights=null to their command line)."
        )
    from timm.models import load_state_dict  # safetensors, or torch.load(weights_only=True); unwraps "state_dict"

    try:
        state = load_state_dict(str(path), device="cpu", weights_only=True)
    except Exception as e:  # a bad file, whatever the reader raises
        why = first_line(e)
        if "weights only" in why.lower() or "weights_only" in why:  # not torch's advice to unpickle it anyway
            why = "it holds pickled objects, not only tensors, and brisk unpickles nothing else"
        raise BriskError(f"model.net.weights={path}: cannot be read as weights ({why}). {FIX}.") from None
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise BriskError(f"model.net.weights={path}: holds no state_dict (a mapping of names to tensors). {FIX}.")
    return dict(state)


def load_backbone(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load `state` into `model`, the head excepted where its shape differs (the data has its own classes)."""
    head = next((n for n, m in model.named_modules() if m is model.get_classifier()), None)
    own = model.state_dict()
    in_head = {k for k in own if head and k.startswith(f"{head}.")}
    state = {k: v for k, v in state.items() if not (k in in_head and v.shape != own[k].shape)}
    missing = [k for k in own if k not in state and k not in in_head and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    wrong = [k for k in state if k in own and state[k].shape != own[k].shape]
    for what, keys in (("lacks", missing), ("has unknown keys", unexpected), ("has other shapes at", wrong)):
        if keys:
            raise BriskError(
                f"{source}: not weights of this model: it {what} {', '.join(keys[:3])}"
                f"{' ...' if len(keys) > 3 else ''}. Check model.net.name against the model the file was saved from."
            )
    model.load_state_dict(state, strict=False)


@NETS.register("timm")
class TimmNet(nn.Module):
    """A timm model with `num_classes` outputs.

    Args:
        num_classes: the data's classes; the pretrained head is replaced by a new one of this size.
        name: a timm architecture, optionally with a pretrained tag (`resnet18.a1_in1k`): its default config
            gives the input size and the normalization the weights were trained with.
        weights: a local state_dict file of that architecture (.safetensors, or a torch.save file, read with
            weights_only=True). The head's tensors are kept only if their shape fits `num_classes`.
        pretrained: without `weights`, take timm's own weights for `name` from the Hugging Face (or torch hub)
            cache, which must be filled already.
        dropout: timm's `drop_rate`, before the head.

    `input_stats`: the per-channel (mean, std) on the 0..255 scale the loaded weights expect, or None without
    weights (the data's own statistics then apply); the model builder gives it to the DataModule.
    """

    def __init__(
        self, num_classes: int, name: str, weights: str | None = None, pretrained: bool = False, dropout: float = 0.0
    ) -> None:
        super().__init__()
        timm = _timm()
        check_name(timm, name)
        try:
            self.model = timm.create_model(name, pretrained=False, num_classes=num_classes, drop_rate=dropout)
        except (RuntimeError, ValueError, TypeError) as e:  # an unknown pretrained tag, an argument the model lacks
            raise BriskError(f"model.net.name={name}: timm cannot build it ({first_line(e)}).") from None
        self.input_stats = None
        if weights or pretrained:
            cfg = self.model.pretrained_cfg
            path = Path(weights).expanduser() if weights else cached_weights(cfg, name)
            source = f"model.net.weights={path}" if weights else f"timm's cached weights {path}"
            load_backbone(self.model, read_state_dict(path), source)
            self.input_stats = tuple([255.0 * float(c) for c in cfg[key]] for key in ("mean", "std"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def get_classifier(self) -> nn.Module:
        """The head (timm's name for it): what model.freeze_backbone leaves trainable."""
        return self.model.get_classifier()
