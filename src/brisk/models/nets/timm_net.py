"""TimmNet: any timm model by name, its classifier head sized for the data, optionally from pretrained weights.

The name is data: it must be an architecture timm registers (`timm.list_models()`), with an optional pretrained
tag (`resnet18.a1_in1k`). Hub names (`hf-hub:...`, `local-dir:...`, `timm/...`) are refused: timm would download
or read a folder's config for them. Weights come from a local file, read as tensors only (safetensors, or
torch.load with weights_only=True), or, with `pretrained`, from timm's own hub loading: its Hugging Face (or torch
hub) cache, downloaded into it when it is not there yet.
"""

from __future__ import annotations

import difflib
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from brisk.errors import BriskError, first_line
from brisk.registry import NETS

FIX = "pass model.net.weights=<a state_dict file saved with torch.save or safetensors>"
OFFLINE = "HF_HUB_OFFLINE is set"


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


def cached_weights(cfg: Mapping) -> Path | None:
    """The file of timm's pretrained weights for `cfg` in the Hugging Face or torch hub cache, or None."""
    if hub_id := cfg.get("hf_hub_id"):
        from huggingface_hub import try_to_load_from_cache

        # the names timm's load_state_dict_from_hf tries, in its order
        for filename in (cfg.get("hf_hub_filename"), "model.safetensors", "pytorch_model.bin"):
            found = try_to_load_from_cache(hub_id, filename) if filename else None
            if isinstance(found, str):
                return Path(found)
    if url := cfg.get("url"):
        found = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)
        if found.is_file():
            return found
    return None


def unreachable(cfg: Mapping) -> str | None:
    """Why the place timm downloads `cfg`'s weights from cannot be reached now, or None if it answers.

    One request, no retries: huggingface_hub retries a failed connection with backoff (about 23 s of sleeps),
    and timm tries two file names, so timm's own attempt took 55 s to fail on a machine without network.
    """
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import HfHubHTTPError

    if (hub_id := cfg.get("hf_hub_id")) and constants.HF_HUB_OFFLINE:
        return OFFLINE
    try:
        if hub_id:  # timm prefers the hub to a url when a model has both
            get_hf_file_metadata(hf_hub_url(hub_id, cfg.get("hf_hub_filename") or "model.safetensors"))
        else:
            urllib.request.urlopen(urllib.request.Request(cfg["url"], method="HEAD"), timeout=10).close()
    except (HfHubHTTPError, urllib.error.HTTPError):
        return None  # the server answered (a 404 for this file name too): timm's download reports what it says
    except Exception as e:  # whatever the transport raises: no name resolution, refused, timed out
        return first_line(e)
    return None


def pretrained_model(timm, name: str, **kwargs) -> nn.Module:
    """timm.create_model(name, pretrained=True): timm's hub loading, from its cache or downloaded into it; the
    head is new when num_classes differs from the weights' (timm drops theirs). Offline without the weights in
    the cache, one line naming model.net.weights."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    cfg = cfg.to_dict() if cfg else {}
    where = f"hf-hub {cfg['hf_hub_id']}" if cfg.get("hf_hub_id") else cfg.get("url")
    if not where:
        raise BriskError(f"model.net.pretrained=true: timm has no pretrained weights for {name}: {FIX}.")
    if cached_weights(cfg) is None and (why := unreachable(cfg)):
        fill = "unset HF_HUB_OFFLINE" if why == OFFLINE else "run once with network"
        raise BriskError(
            f"model.net.pretrained=true: timm's weights for {name} ({where}) are not in the local cache, and "
            f"cannot be downloaded ({why}): {FIX}, or {fill} to fill the cache."
        )
    try:
        return timm.create_model(name, pretrained=True, **kwargs)
    except (OSError, RuntimeError, ValueError) as e:  # a download cut off, a gated repository, a bad file
        raise BriskError(
            f"model.net.pretrained=true: timm could not load its weights for {name} ({where}): {first_line(e)}; {FIX}."
        ) from None


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
        why = f"{type(e).__name__}: {first_line(e)}"  # a text file read by torch.load is "KeyError: 101"
        if "weights only" in why.lower() or "weights_only" in why:  # not torch's advice to unpickle it anyway
            why = "it holds pickled objects, not only tensors, and brisk unpickles nothing else"
        raise BriskError(f"model.net.weights={path}: cannot be read as weights ({why}); {FIX}.") from None
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise BriskError(f"model.net.weights={path}: holds no state_dict (a mapping of names to tensors); {FIX}.")
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
        pretrained: without `weights`, timm's own weights for `name` (timm.create_model(pretrained=True)): from
            the Hugging Face (or torch hub) cache, or downloaded into it. Offline with an empty cache, one line.
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
        kwargs = {"num_classes": num_classes, "drop_rate": dropout}
        try:
            if pretrained and not weights:  # a file, when given, is the weights asked for: nothing to download
                self.model = pretrained_model(timm, name, **kwargs)
            else:
                self.model = timm.create_model(name, pretrained=False, **kwargs)
        except (RuntimeError, ValueError, TypeError) as e:  # an unknown pretrained tag, an argument the model lacks
            raise BriskError(f"model.net.name={name}: timm cannot build it ({first_line(e)}).") from None
        self.input_stats = None
        if weights:
            path = Path(weights).expanduser()
            load_backbone(self.model, read_state_dict(path), f"model.net.weights={path}")
        if weights or pretrained:
            cfg = self.model.pretrained_cfg
            self.input_stats = tuple([255.0 * float(c) for c in cfg[key]] for key in ("mean", "std"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def get_classifier(self) -> nn.Module:
        """The head (timm's name for it): what model.freeze_backbone leaves trainable."""
        return self.model.get_classifier()
