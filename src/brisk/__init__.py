"""brisk: a fast PyTorch Lightning + Hydra template for CIFAR-10.

The names in `__all__` are brisk's public API, for code built on top of brisk (the speed lab, brisk-bench,
uses nothing else): `from brisk import build_trainer`. They keep their names when the modules behind them
move. Each is imported on first use (PEP 562), so `import brisk` stays light: no torch, no Lightning.
"""

import time

from brisk.utils.lazy import exports

__version__ = "0.1.0"
# Where /proc is missing, the startup clock (brisk.callbacks.startup_clock) starts from here. A monotonic reading, as
# /proc's clock since boot is: the wall clock is slewed (on the 2-core VM it ran 0.5% fast against both).
IMPORTED_AT = time.monotonic()

# public name -> its module (":name there" where it differs): the one place that knows where each lives
__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "BriskError": ".errors",
        "entry_point": ".cli",
        "quote_group_options": ".cli",
        "build": ".run.prepare",
        "build_datamodule": ".run.builder",
        "build_model": ".models.build",
        "build_trainer": ".run.prepare",
        "always_on": ".run.builder",
        "resolve_precision": ".run.precision:resolve",
        "sync": ".callbacks.speed_meter",
        "hardware": ".run.summary",
        "write_json": ".run.summary:write",
        "write_text": ".utils.files",
        "published": ".utils.files",
        "table_cell": ".utils.tables:cell",
        "small_ops": ".utils.threads",
        "TimeToAccuracy": ".callbacks.time_to_accuracy",
        "NETS": ".registry",
        "CALLBACKS": ".registry",
    },
)
