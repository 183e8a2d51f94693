"""Rows of results as text: CSV for scripts, Markdown for people. One writer each, for every table brisk keeps.

Cells often come from names nobody checked (run folders, image files, class folders, override keys), so every cell
is made inert here: no control characters reach a terminal, no CSV cell is a formula a spreadsheet would run, and
no Markdown cell adds a column."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from typing import Any

# Terminal escape sequences whole (CSI such as ESC[31m, OSC such as a title or a hyperlink, two-byte ones), then
# any control character left: C0, DEL, C1, and the bidirectional overrides that make a name read as another.
ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?")
CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# OWASP's CSV injection rule: a cell starting with one of these is a formula to Excel, LibreOffice and Sheets (its
# tab and carriage return are spaces by then, and a space before the sign does not make a formula text everywhere).
FORMULA = ("=", "+", "-", "@")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def printable(text: str) -> str:
    """`text` without terminal escape sequences or control characters; tabs and line breaks become one space."""
    return CONTROLS.sub("", ESCAPES.sub("", re.sub(r"[\t\n\r]+", " ", text)))


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell no spreadsheet runs: text starting with = + - @ gets a leading ', numbers (also as
    text, such as "-0.5" or a probability read back from a part file) stay numbers."""
    if not isinstance(value, str):
        return value
    text = printable(value)
    return f"'{text}" if text.lstrip().startswith(FORMULA) and not NUMBER.fullmatch(text) else text


def csv_rows(rows: Iterable[Iterable[Any]]) -> str:
    """Rows of cells as CSV text, every cell through `csv_cell`."""
    buf = io.StringIO()
    csv.writer(buf).writerows([csv_cell(v) for v in row] for row in rows)
    return buf.getvalue()


def csv_text(rows: Iterable[Mapping[str, Any]], fields: list[str]) -> str:
    """The rows under a header of `fields`; a row's missing field is an empty cell, a field not listed is left out."""
    return csv_rows([fields, *([row.get(f, "") for f in fields] for row in rows)])


def cell(value: Any) -> str:
    """A value as a Markdown cell: floats to 4 significant digits (whole numbers at 1000 and above), printable,
    `|` escaped, backslashes doubled (one before a `|` would otherwise escape the escape and split the cell)."""
    if isinstance(value, float):
        text = f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    else:
        text = "" if value is None else str(value)
    return printable(text).replace("\\", "\\\\").replace("|", "\\|")


def markdown(rows: Iterable[Mapping[str, Any]], fields: list[str], numeric: Iterable[str] = ()) -> str:
    """A Markdown table of `fields`; the `numeric` ones are aligned right."""
    right = set(numeric)
    lines = [
        "| " + " | ".join(map(cell, fields)) + " |",
        "|" + "|".join("---:" if f in right else "---" for f in fields) + "|",
    ]
    lines += ["| " + " | ".join(cell(row.get(f)) for f in fields) + " |" for row in rows]
    return "\n".join(lines) + "\n"
