"""One exception type for mistakes the user can fix (bad config, missing or corrupt data), and the one way a
refused command ends."""

from __future__ import annotations

import sys
from typing import NoReturn


class BriskError(Exception):
    """A problem the user can fix. The entry points print the message alone, with no traceback."""


def refuse(error: object) -> NoReturn:
    """The end of a refused command: its one `brisk: error:` line on stderr, and exit status 2."""
    print(f"brisk: error: {error}", file=sys.stderr, flush=True)
    sys.exit(2)


def first_line(text: object) -> str:
    return str(text).strip().splitlines()[0].strip() if str(text).strip() else ""
