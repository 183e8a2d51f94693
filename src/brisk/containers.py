"""Plain containers from Hydra configs."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf


def plain(value: Any) -> Any:
    """A resolved dict/list for an OmegaConf node, anything else unchanged: hparams must be plain to load
    under torch's weights_only=True."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value
