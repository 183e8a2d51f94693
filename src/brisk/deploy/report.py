"""The fp32 vs int8 table of brisk-export: file size, test accuracy, CPU images/s in onnxruntime."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from brisk.deploy.onnx import INPUT, OUTPUT
from brisk.utils.tables import cell


def images_per_sec(sessions: dict[str, Any], images: np.ndarray, runs: int) -> dict[str, float]:
    """Each session's images/s on one batch: the median of `runs` timed runs, after one untimed run each.

    The sessions take turns, in reverse order every other round, so load from other jobs or a CPU
    clocking down weighs on all of them alike (as brisk-bench does).
    """
    names = list(sessions)
    for name in names:
        sessions[name].run([OUTPUT], {INPUT: images})  # allocations and kernel selection, untimed
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(runs):
        for name in names if i % 2 == 0 else reversed(names):
            start = time.perf_counter()
            sessions[name].run([OUTPUT], {INPUT: images})
            times[name].append(time.perf_counter() - start)
    return {name: len(images) / statistics.median(t) for name, t in times.items()}


def row(name: str, path: Path, result: dict[str, Any], speed: float) -> dict[str, Any]:
    return {
        "model": name,
        "file": path.name,
        "bytes": path.stat().st_size,
        "test_acc": result["test_acc"],
        "images_per_sec": speed,
        "max_abs_logit_diff": result["max_abs_logit_diff"],
    }


def markdown(rows: list[dict[str, Any]], threads: int, batch: int) -> str:
    head = (
        f"| model | file | size (KiB) | test acc | CPU images/s (onnxruntime, {threads} threads, batch {batch}) "
        "| max abs logit diff vs PyTorch fp32 |\n|---|---|---:|---:|---:|---:|\n"
    )
    lines = [
        f"| {cell(r['model'])} | {cell(r['file'])} | {r['bytes'] / 1024:.1f} | {r['test_acc']:.4f} "
        f"| {r['images_per_sec']:.0f} | {r['max_abs_logit_diff']:.2g} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"
