"""A package's public names, each imported on first use (PEP 562): importing the package imports none of its
modules, so a run loads only what it uses."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def exports(package: str, where: dict[str, str]) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """The `__all__`, `__getattr__` and `__dir__` of `package`, whose public names `where` maps to `.module` (relative
    to the package) or `.module:attribute` where the name there differs."""

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where[name].partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        setattr(sys.modules[package], name, value)  # later lookups find it without coming here
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return list(where), __getattr__, __dir__
