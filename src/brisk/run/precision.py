"""trainer.precision: the names Lightning accepts, brisk's `auto`, and what the run really got."""

from __future__ import annotations

import logging

import lightning as L
import torch

from brisk import compat
from brisk.errors import BriskError

log = logging.getLogger("brisk")


def name(value) -> str:
    """The name Lightning runs a precision flag under (`16` -> `16-mixed`); `auto` (brisk's own) stays `auto`."""
    flags = {"auto": "auto", **compat.precision_flags()}
    if str(value) not in flags:
        raise BriskError(
            f"trainer.precision={value} is unknown. Choose one of: {', '.join(flags)} (e.g. precision=bf16-mixed)."
        )
    return flags[str(value)]


def resolve(requested: str | int, accelerator: str) -> str:
    """`auto` -> bf16-mixed on GPUs that support it, 16-mixed on older GPUs, 32 elsewhere.

    Other values pass unchanged: checks.validate has already refused unknown ones."""
    requested = str(requested)
    if requested != "auto":
        return requested
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "32-true"


def report(requested: str | int, accelerator: str, trainer: L.Trainer) -> None:
    """Log the precision the run got, and warn where it is not the one asked for."""
    if name(resolve(requested, accelerator)) != trainer.precision:
        # e.g. 16-mixed on CPU, which Lightning runs as bf16-mixed with only a warning
        log.warning("precision=%s is not available here: running as %s", requested, trainer.precision)
    else:
        log.info("precision: %s (requested %s)", trainer.precision, requested)
