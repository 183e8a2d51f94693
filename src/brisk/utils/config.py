"""Plain containers from Hydra configs, and a walk through them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


def plain(value: Any) -> Any:
    """A resolved dict/list for an OmegaConf node, anything else unchanged: hparams must be plain to load
    under torch's weights_only=True."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value


def nodes(node: Any, place: str = "") -> Iterator[tuple[str, Any]]:
    """(place, node) for a plain nested config and everything in it: `model`, `model.net`, `data.x[0]`."""
    yield place, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from nodes(value, f"{place}.{key}" if place else str(key))
    elif isinstance(node, list | tuple):  # a checkpoint may hold tuples, which OmegaConf makes lists
        for i, value in enumerate(node):
            yield from nodes(value, f"{place}[{i}]")
