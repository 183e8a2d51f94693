"""comparison.csv, comparison.md and comparison.png: every run below a folder side by side (brisk-compare, and
every sweep at its end).

A run is a folder with a summary.json. Its columns are the overrides that differ between the runs (from its
.hydra/overrides.yaml), then the main metrics, then (CSV only) every other number of summary.json, flattened:
`metrics.test/acc` reads `test/acc`, `precision.effective` stays as it is, lists are left out. Summaries are read
as data, whatever keys they have; a damaged one is skipped with a warning.
"""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path
from typing import Any

from brisk.errors import BriskError
from brisk.search.sweep_plot import varying
from brisk.utils import run_files
from brisk.utils.files import published, write_text
from brisk.utils.tables import csv_text, markdown, printable

log = logging.getLogger("brisk")
NAMES = ("comparison.csv", "comparison.md", "comparison.png")
# The Markdown table's metrics, where the runs have them, in this order; the first accuracy found is plotted.
MAIN = ["test/acc", "val/acc_best", "test/loss", "fit_seconds", "images_per_sec", "epochs", "params", "flops_per_image"]
ACCURACY = ("test/acc", "val/acc_best", "val/acc")
# One labelled bar a run: past this many the labels overlap, and drawing 10,000 took over a minute.
MAX_PLOTTED = 300


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Numbers and strings at any depth of a summary, keyed by their dotted path; lists (class names, confusion
    matrices) are left out, and so is the `metrics.` before the logged metrics' own names."""
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            name = f"{prefix}{key}"
            out.update(flatten(value, "" if name == "metrics" else f"{name}."))
    elif isinstance(node, int | float | str) and not isinstance(node, bool):
        out[prefix[:-1]] = node
    return out


def _natural(path: Path) -> list:
    """Sort key: job 10 after job 9."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def _overrides(run_dir: Path, summary: dict) -> list[str]:
    """The run's command-line overrides: .hydra/overrides.yaml, or summary.json's copy where that is missing."""
    saved = run_dir / ".hydra" / "overrides.yaml"
    if os.path.lexists(saved):  # a FIFO or a link too: run_files refuses it, with its own line
        try:
            given = run_files.load_yaml(saved, "a list of overrides")
            if isinstance(given, list):
                return [_unquoted(str(o)) for o in given]
        except BriskError as e:
            log.warning("%s Using summary.json's overrides.", printable(str(e)))
    given = summary.get("overrides")
    return [_unquoted(str(o)) for o in given] if isinstance(given, list) else []


def _unquoted(override: str) -> str:
    """`precision='16-mixed'` as `precision=16-mixed`: a value quoted on the command line is shown as Hydra reads
    it, so the same value typed both ways is one value, not two."""
    key, sep, value = override.partition("=")
    quote = value[:1]
    if sep and quote in ("'", '"') and len(value) >= 2 and value.endswith(quote):
        inner, escaped = value[1:-1], "\\" + quote
        if quote not in inner.replace(escaped, ""):  # one quoted string, not 'a','b'
            return f"{key}={inner.replace(escaped, quote)}"
    return override


def _numbers_only(summary: dict[str, Any], run: str) -> dict[str, Any]:
    """The flattened summary without numbers no table or plot can hold (NaN, infinities, an int past float's range
    such as 10**400), each run's left out in one warning line: the run itself stays in the comparison."""
    absurd = [k for k, v in summary.items() if isinstance(v, int | float) and not _finite(v)]
    if absurd:
        log.warning("%s: left out %s: not a finite number", printable(run), ", ".join(printable(k) for k in absurd))
    return {k: v for k, v in summary.items() if k not in absurd}


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _summaries(folder: Path, runs: list[Path] | None) -> list[Path]:
    """Every summary.json below `folder`, or those of `runs` in their order (a search's trials, some of them in
    earlier sweep folders); a run folder that is gone (moved, or on another machine) is left out in one line."""
    if runs is None:
        return sorted(folder.rglob("summary.json"), key=_natural)
    found = []
    for run in runs:
        if os.path.lexists(run / "summary.json"):
            found.append(run / "summary.json")
        elif not run.is_dir():
            log.warning("%s: not found here, so it is left out of the comparison", printable(str(run)))
    return found


def gather(folder: Path, runs: list[Path] | None = None) -> list[dict[str, Any]]:
    """One row per readable summary.json below `folder` (or in the folders `runs`): `run` (its folder, relative to
    `folder`), `overrides`, and its flattened numbers. Each summary is read by brisk.utils.run_files: a FIFO, a link
    to /dev/zero, a file too large or nested too deep is skipped with a warning, as a damaged one is."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BriskError(f"{folder}: no such folder. Give the folder that holds the runs, e.g. logs/train/runs.")
    rows = []
    for path in _summaries(folder, runs):
        try:
            summary = run_files.load_json(path)
            if not isinstance(summary, dict):
                raise BriskError(f"{path}: a JSON {type(summary).__name__}, not an object")
        except BriskError as e:
            # printable: a run folder's name may hold terminal escape sequences
            reason = str(e).removeprefix(f"{path}: ")
            log.warning("%s: skipped, not a readable summary (%s)", printable(str(path)), printable(reason))
            continue
        try:
            run = path.parent.relative_to(folder).as_posix()
        except (
            ValueError
        ):  # a run given by its absolute path: this sweep's, or ../<earlier sweep>/3 of a resumed search
            run = Path(os.path.relpath(path.parent, folder)).as_posix()
        name = run if run != "." else path.parent.name  # the folder is itself a run
        numbers = _numbers_only(flatten(summary), name)
        rows.append({**numbers, "run": name, "overrides": _overrides(path.parent, summary)})
    if not rows:
        raise BriskError(
            f"{folder}: no readable summary.json below it, so there is nothing to compare. Give a folder of finished "
            "runs (each run writes summary.json at its end), e.g. logs/train/multiruns/<sweep> or logs/train/runs."
        )
    return rows


def table(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str], list[str], list[str]]:
    """(the rows with a column per differing override, those overrides, the Markdown table's columns, the CSV's)."""
    swept = varying([r["overrides"] for r in rows])
    rows = [{**r, **{k: v[i] for k, v in swept.items()}} for i, r in enumerate(rows)]
    main = [m for m in MAIN if any(m in r for r in rows)]
    shown = ["run", *swept, *main]
    rest = sorted({k for r in rows for k in r} - {*shown, "overrides", "run_dir", "ckpt_path", "last_ckpt_path"})
    return rows, list(swept), shown, [*shown, *rest]


def write(folder: Path, runs: list[Path] | None = None) -> list[Path]:
    """Write the three files into `folder`, comparing the runs below it or those of `runs`; returns their paths (the
    plot's only if it was drawn)."""
    folder = Path(folder)
    rows, swept, shown, fields = table(gather(folder, runs))
    csv_path, md_path, png_path = (folder / n for n in NAMES)
    numeric = [f for f in shown if all(isinstance(r.get(f), int | float) for r in rows if f in r)]
    try:
        write_text(csv_path, csv_text(rows, fields))
        runs = f"{len(rows)} run{'s' if len(rows) > 1 else ''}"
        elsewhere = sum(r["run"].startswith("../") for r in rows)
        where = f"{folder}, {elsewhere} of them in earlier sweep folders of the study" if elsewhere else f"{folder}"
        head = f"# {runs} in {where}\n\nEvery number of each summary.json: {csv_path.name}.\n\n"
        write_text(md_path, head + markdown(rows, shown, numeric))
    except OSError as e:
        raise BriskError(
            f"{folder}: cannot write the comparison there ({e.strerror}). Give a folder you can write to."
        ) from None
    return [csv_path, md_path, *([png_path] if plot(rows, swept, png_path) else [])]


def plot(rows: list[dict[str, Any]], swept: list[str], path: Path) -> bool:
    """Each run's accuracy as a bar, beside accuracy against fit time. False (with a log line) if nothing to draw."""
    metric = next((m for m in ACCURACY if any(isinstance(r.get(m), int | float) for r in rows)), None)
    if metric is None:
        log.info("%s skipped: no run has %s", path.name, " or ".join(ACCURACY))
        return False
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.info("%s skipped: matplotlib is not installed (pip install -e '.[plots]')", path.name)
        return False
    drawn = [r for r in rows if isinstance(r.get(metric), int | float) and math.isfinite(r[metric])]
    if len(drawn) > MAX_PLOTTED:
        log.warning(
            "%s skipped: %d runs are more than one plot shows (at most %d bars); the tables hold every run",
            path.name,
            len(drawn),
            MAX_PLOTTED,
        )
        return False
    labels = [printable(" ".join([r["run"], *(f"{k}={r[k]}" for k in swept if r.get(k) != "")])) for r in drawn]
    fig = Figure(figsize=(11, 1.2 + 0.35 * len(drawn)), layout="constrained")
    bars, timed = fig.subplots(1, 2, width_ratios=[3, 2])
    bars.barh(range(len(drawn)), [r[metric] for r in drawn], color="#2a7")
    bars.set_yticks(range(len(drawn)), [label[:70] for label in labels], fontsize=7)
    bars.invert_yaxis()  # the first run on top, as in the table
    bars.set_xlabel(metric)
    bars.set_title(f"{metric} per run", fontsize=9)
    times = [(r["fit_seconds"], r[metric], r["run"]) for r in drawn if isinstance(r.get("fit_seconds"), int | float)]
    if times:
        timed.scatter([t for t, _, _ in times], [v for _, v, _ in times], color="#36c")
        for t, v, run in times:
            timed.annotate(printable(run)[:20], (t, v), fontsize=7, xytext=(3, 3), textcoords="offset points")
        timed.set_xlabel("fit seconds")
        timed.set_ylabel(metric)
        timed.set_title(f"{metric} against training time", fontsize=9)
    else:
        timed.set_axis_off()
    fig.suptitle(f"{len(drawn)} run{'s' if len(drawn) > 1 else ''} in {path.parent.name}", fontsize=10)
    try:
        with published(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    except OSError as e:
        log.warning("could not write %s: %s", path, e)
        return False
    return True


def publish(folder: Path, runs: list[Path] | None = None) -> None:
    """Write the comparison and print where, with the folder as the last line (brisk-compare, a sweep's end)."""
    for path in write(folder, runs):
        print(path, flush=True)
    print(Path(folder), flush=True)
