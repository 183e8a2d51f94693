"""What the entry points share: where the configs are, and user errors printed without a traceback wall."""

from __future__ import annotations

import functools
import logging
import re
import sys
from pathlib import Path

from brisk.errors import BriskError

CONFIG_PATH = str(Path(__file__).resolve().parents[2] / "conf")
log = logging.getLogger("brisk")


def user_errors(task):
    """Turn a BriskError into one line on stderr and exit status 2."""

    @functools.wraps(task)
    def wrapper(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except BriskError as e:
            print(f"brisk: error: {e}", file=sys.stderr, flush=True)
            sys.exit(2)

    return wrapper


def _numeric_groups() -> set[str]:
    """Config groups that have an option named by a number, such as precision=32 or accumulation=4."""
    return {p.parent.name for p in Path(CONFIG_PATH).glob("*/*.yaml") if p.stem.isdigit()}


def quote_group_options(args: list[str]) -> list[str]:
    """Quote numeric group options: Hydra parses `accumulation=4` as the int 4, which it refuses as an option name.

    `accumulation=4` -> `accumulation='4'`, `precision=32,bf16-mixed` -> `precision='32','bf16-mixed'`,
    so the command line reads as the docs say. Anything else passes unchanged.
    """
    groups = _numeric_groups()
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key in groups and re.fullmatch(r"[\w.-]+(,[\w.-]+)*", value):
            arg = f"{key}=" + ",".join(f"'{v}'" for v in value.split(","))
        out.append(arg)
    return out


def hydra_entry(hydra_main):
    """A console-script entry point around a @hydra.main function, with numeric group options quoted."""

    @functools.wraps(hydra_main)
    def entry() -> None:
        sys.argv[1:] = quote_group_options(sys.argv[1:])
        hydra_main()

    return entry
