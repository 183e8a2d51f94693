"""summary.json: what a script needs from a finished run, without parsing logs."""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

import lightning as L
import torch


def hardware() -> dict[str, Any]:
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "torch": torch.__version__,
        "lightning": L.__version__,
        "python": platform.python_version(),
    }


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in sorted(metrics.items()) if getattr(v, "numel", lambda: 1)() == 1}


def strict(value: Any) -> Any:
    """NaN and +-Inf become None (null): JSON has no such numbers, and strict readers refuse Python's `NaN`."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def write(path: Path, summary: dict[str, Any]) -> None:
    """Write strict JSON atomically: a reader never sees half a file, nor a bare NaN."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(strict(summary), indent=2, sort_keys=True, allow_nan=False) + "\n")
    tmp.replace(path)
