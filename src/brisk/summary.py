"""summary.json: what a script needs from a finished run, without parsing logs."""

from __future__ import annotations

import json
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


def write(path: Path, summary: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
