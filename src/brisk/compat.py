"""Every use of a private Lightning or Hydra name, in one place: one small function per use, each with the
version it was checked on and why there is no public way. `pyproject.toml` pins lightning below 2.7 for these.
"""

from __future__ import annotations

from typing import get_args


def precision_flags() -> dict[str, str]:
    """Every `precision` the Trainer accepts, as text, -> the name it runs under (`16` -> `16-mixed`).

    Checked on lightning 2.6.6: the accepted values exist only as the private Literal types behind the Trainer's
    `precision` annotation (and its alias table); Lightning offers no public list.
    """
    from lightning.fabric.plugins.precision import precision as p

    names = {name: name for name in get_args(p._PRECISION_INPUT_STR)}
    return {
        **names,
        **{alias: p._PRECISION_INPUT_STR_ALIAS_CONVERSION[alias] for alias in get_args(p._PRECISION_INPUT_STR_ALIAS)},
    }
