"""sweep_plot.png: the optimized metric of each finished job against each parameter the jobs differ in.

Drawn from sweep_summary.csv's rows between jobs, never during training. matplotlib's object API
(Figure, no pyplot): no global backend or figure state, so it is safe in any process a launcher uses.
"""

from __future__ import annotations

import logging
import math
import shlex
from pathlib import Path

from brisk.utils.files import published

log = logging.getLogger("brisk")


def swept(rows: list[dict]) -> dict[str, list[str]]:
    """key -> the value in each row, for the keys whose value is not the same in every row."""
    return varying([shlex.split(r["overrides"]) for r in rows])


def varying(overrides: list[list[str]]) -> dict[str, list[str]]:
    """key -> its value in each run's overrides (`key=value`, "" where a run has none), for the keys whose value is
    not the same in every run; a single run: all its keys. A `+` or `++` before a key is left out."""
    parsed = [dict(o.lstrip("+").partition("=")[::2] for o in given if "=" in o) for given in overrides]
    keys = list(dict.fromkeys(k for p in parsed for k in p))
    values = {k: [p.get(k, "") for p in parsed] for k in keys}
    differ = {k: v for k, v in values.items() if len(set(v)) > 1}
    return differ or values  # a single job: plot against whatever it was given


def _numbers(values: list[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


def write(rows: list[dict], path: Path) -> None:
    """Draw the plot to `path` (written whole, then renamed). Skipped, with a log line, without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.info("sweep_plot.png skipped: matplotlib is not installed (pip install -e '.[plots]')")
        return
    done = [r for r in rows if r["status"] == "completed" and r["value"] not in ("", None)]
    params = swept(done) if done else {}
    metric = rows[-1]["metric"] if rows else "value"
    ncols = max(1, min(3, len(params)))
    nrows = max(1, math.ceil(len(params) / ncols))
    fig = Figure(figsize=(3.6 * ncols, 2.8 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    ys = [float(r["value"]) for r in done]
    for ax, (key, values) in zip(axes, params.items(), strict=False):
        xs = _numbers(values)
        if xs is None:  # categories at positions: labels such as "1" and "b" must not be mixed as numbers
            labels = list(dict.fromkeys(values))
            ax.scatter([labels.index(v) for v in values], ys, color="#2a7")
            ax.set_xticks(range(len(labels)), labels, rotation=30, fontsize=8)
            ax.set_xlim(-0.5, len(labels) - 0.5)
        else:
            ax.scatter(xs, ys, color="#2a7")
            if min(xs) > 0 and max(xs) / min(xs) >= 100:
                ax.set_xscale("log")
        ax.set_xlabel(key, fontsize=9)
        ax.set_ylabel(metric, fontsize=9)
    for ax in axes[len(params) :]:
        ax.set_axis_off()
    if not params:
        axes[0].text(0.5, 0.5, "no job has finished with a value yet", ha="center", va="center")
    fig.suptitle(f"{metric} by parameter: {len(done)} of {len(rows)} jobs finished", fontsize=10)
    try:
        with published(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    except Exception as e:  # a plot must never stop a sweep
        log.warning("could not write %s: %s", path, e)
