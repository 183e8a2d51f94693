"""The fp32 vs int8 table of brisk-export: file size, test accuracy, CPU images/s in onnxruntime."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from brisk.onnx_export import INPUT, OUTPUT


def images_per_sec(sess, images: np.ndarray, runs: int) -> float:
    """Median over `runs` timed runs of one batch, after one untimed run (allocations, kernel selection)."""
    sess.run([OUTPUT], {INPUT: images})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run([OUTPUT], {INPUT: images})
        times.append(time.perf_counter() - start)
    return len(images) / statistics.median(times)


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
        f"| {r['model']} | {r['file']} | {r['bytes'] / 1024:.1f} | {r['test_acc']:.4f} | {r['images_per_sec']:.0f} "
        f"| {r['max_abs_logit_diff']:.2g} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"
