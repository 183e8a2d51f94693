"""trainer.precision: the names Lightning accepts, brisk's `auto`, and what the run really got."""

from __future__ import annotations

import logging
import typing

import lightning as L
import torch

from brisk.errors import BriskError

log = logging.getLogger("brisk")


# Lightning's short names (its Trainer docs, `precision`): 16 and bf16 are mixed precision, 32 and 64 true.
ALIASES = {"16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true"}


def flags() -> dict[str, str]:
    """Every `precision` the Trainer accepts, as text, -> the name it runs under (`16` -> `16-mixed`): the values
    of the Literal types in the Trainer's public `precision` annotation."""
    hint = typing.get_type_hints(L.Trainer.__init__)["precision"]
    values = [str(v) for literal in typing.get_args(hint) for v in typing.get_args(literal)]
    return {v: ALIASES.get(v, v) for v in values}


def name(value) -> str:
    """The name Lightning runs a precision flag under (`16` -> `16-mixed`); `auto` (brisk's own) stays `auto`."""
    flags_ = {"auto": "auto", **flags()}
    if str(value) not in flags_:
        raise BriskError(
            f"trainer.precision={value} is unknown. Choose one of: {', '.join(flags_)} (e.g. precision=bf16-mixed)."
        )
    return flags_[str(value)]


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
