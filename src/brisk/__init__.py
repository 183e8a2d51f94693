"""brisk: a fast PyTorch Lightning + Hydra template for CIFAR-10.

The names in `__all__` are brisk's public API, for code built on top of brisk (the speed lab, brisk-bench,
uses nothing else): `from brisk import build_trainer`. They keep their names when the modules behind them
move. Each is imported on first use (PEP 562), so `import brisk` stays light: no torch, no Lightning.
"""

import importlib
import time

__version__ = "0.1.0"
# Where /proc is missing, the startup clock (brisk.callbacks.startup_clock) starts from here.
IMPORTED_AT = time.time()

# public name -> (module, name there): the one place that knows where each lives
_PUBLIC = {
    "BriskError": (".errors", "BriskError"),
    "entry_point": (".cli", "entry_point"),
    "quote_group_options": (".cli", "quote_group_options"),
    "build": (".run.prepare", "build"),
    "build_datamodule": (".run.builder", "build_datamodule"),
    "build_model": (".models.build", "build_model"),
    "build_trainer": (".run.prepare", "build_trainer"),
    "always_on": (".run.builder", "always_on"),
    "resolve_precision": (".run.precision", "resolve"),
    "sync": (".callbacks.speed_meter", "sync"),
    "hardware": (".run.summary", "hardware"),
    "write_json": (".run.summary", "write"),
    "write_text": (".utils.files", "write_text"),
    "published": (".utils.files", "published"),
    "table_cell": (".utils.tables", "cell"),
    "small_ops": (".utils.threads", "small_ops"),
    "TimeToAccuracy": (".callbacks.time_to_accuracy", "TimeToAccuracy"),
    "NETS": (".registry", "NETS"),
    "CALLBACKS": (".registry", "CALLBACKS"),
}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = getattr(importlib.import_module(module, __name__), attribute)
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
