"""One exception type for mistakes the user can fix (bad config, missing or corrupt data), and the one way a
refused command ends."""

from __future__ import annotations

import math
import re
import sys
from typing import NoReturn

# The key a message starts with, as in `data.batch_size=101 ...` or `model.net.type: ...`.
LEADING_KEY = re.compile(r"[+~]?([A-Za-z_][\w.\-]*)(?==|:)")


class BriskError(Exception):
    """A problem the user can fix. The entry points print the message alone, with no traceback. `key`: the config
    key (or command-line argument) at fault, where there is one; the message starts with it, and tests read it."""

    def __init__(self, message: object, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key or (m[1] if (m := LEADING_KEY.match(str(message))) else None)

    def __reduce__(self):  # a sweep's worker hands its error back pickled: keep the key
        return type(self), (str(self), self.key)


class BuildError(Exception):
    """What a constructor raised while brisk built the entry at `key` (the cause): brisk.utils.explain says a user's
    mistake in it (a value it refused, a package it needs) in one line; anything else keeps its traceback."""

    def __init__(self, key: str, entry: object) -> None:
        self.key, self.shown = key, getattr(entry, "__name__", str(entry))
        super().__init__(f"{key}: {self.shown} failed to build")


def check(key: str, value: object, test, wanted: str, kind: type | tuple = (int, float)) -> None:
    """A range, where the value is used: refuse `value` of `key` unless it is a finite `kind` (not a bool) that
    passes `test`. The schemas (brisk.run.schemas) check types as the config is composed; this also guards a caller
    from Python, and a number that is NaN or infinite, which OmegaConf takes as a float."""
    number = isinstance(value, kind) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and test(value)):
        raise BriskError(f"{key}={value!r} must be {wanted}.", key)


def check_flag(key: str, value: object) -> None:
    """A switch is a bool: `maybe`, 1 or "yes" are refused rather than read as true."""
    if not isinstance(value, bool):
        raise BriskError(f"{key}={value!r} must be true or false.", key)


def refuse(error: object) -> NoReturn:
    """The end of a refused command: its one `brisk: error:` line on stderr, and exit status 2."""
    print(f"brisk: error: {error}", file=sys.stderr, flush=True)
    sys.exit(2)


def first_line(text: object) -> str:
    return str(text).strip().splitlines()[0].strip() if str(text).strip() else ""
