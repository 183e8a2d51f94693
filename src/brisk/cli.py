"""What the entry points share: where the configs are, and user errors printed without a traceback wall."""

from __future__ import annotations

import functools
import logging
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
