"""Rows of results as text: CSV for scripts, Markdown for people. One writer each, for every table brisk keeps."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from typing import Any


def csv_text(rows: Iterable[Mapping[str, Any]], fields: list[str]) -> str:
    """The rows under a header of `fields`; a row's missing field is an empty cell, a field not listed is left out."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def cell(value: Any) -> str:
    """A value as a Markdown cell: floats to 4 significant digits (whole numbers at 1000 and above), `|` escaped."""
    if isinstance(value, float):
        text = f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    else:
        text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: Iterable[Mapping[str, Any]], fields: list[str], numeric: Iterable[str] = ()) -> str:
    """A Markdown table of `fields`; the `numeric` ones are aligned right."""
    right = set(numeric)
    lines = [
        "| " + " | ".join(fields) + " |",
        "|" + "|".join("---:" if f in right else "---" for f in fields) + "|",
    ]
    lines += ["| " + " | ".join(cell(row.get(f)) for f in fields) + " |" for row in rows]
    return "\n".join(lines) + "\n"
