"""Tables that a spreadsheet or terminal would run (issue 42, class 4): names of run folders, image files and
classes reach comparison.csv/md and predictions.csv as inert cells. No CSV cell is a formula (OWASP's rule), no
Markdown cell adds a column, and no control character or terminal escape sequence is written, while numbers,
negative ones included, stay numbers."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from brisk import compare
from brisk.predict import CsvWriter
from brisk.utils.tables import cell, csv_cell

# run folder name -> its cell in comparison.csv
HOSTILE = {
    "=2+5": "'=2+5",
    "@NOW()": "'@NOW()",
    "+1+1": "'+1+1",
    "-2+3": "'-2+3",
    "a|b": "a|b",
    "back\\|slash": "back\\|slash",
    "x\x1b[31mred": "xred",
    "cr\rname": "cr name",
    "title\x1b]0;pwn\x07": "title",
}
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _columns(line: str) -> int:
    """Cells of a Markdown table row as GitHub splits it: a backslash escapes the next character, `\\|` included."""
    return sum(token == "|" for token in re.findall(r"\\.|\|", line)) - 1


def _inert(value: str) -> bool:
    return not CONTROL.search(value) and (not value.lstrip().startswith(("=", "+", "-", "@")))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("=2+5", "'=2+5"),
        ("@NOW()", "'@NOW()"),
        ("\t=1", "' =1"),  # a tab is a space by then, and the formula behind it is still defused
        ("-0.5", "-0.5"),  # a number as text (a probability, an override's value) stays a number
        ("+3e-4", "+3e-4"),
        (-0.5, -0.5),
        ("-cmd", "'-cmd"),
        ("x\x1b[31mred\x1b[0m", "xred"),
        ("a\r\nb", "a b"),
        ("plain", "plain"),
    ],
)
def test_csv_cells_are_never_formulas(value, expected):
    assert csv_cell(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("a|b", "a\\|b"), ("back\\|slash", "back\\\\\\|slash"), ("x\x1b[31mred", "xred"), ("two\nlines", "two lines")],
)
def test_markdown_cells_stay_one_cell(value, expected):
    assert cell(value) == expected and _columns(f"| {cell(value)} |") == 1


def test_compare_writes_hostile_run_names_as_inert_cells(tmp_path, capsys):
    made = {}
    for i, name in enumerate(HOSTILE):
        try:
            (tmp_path / name).mkdir()
        except OSError:  # a filesystem that refuses the name cannot hold such a run
            continue
        made[name] = str(-i)
        summary = {"metrics": {"test/acc": 0.5 + i / 100, "val/loss": -0.5}, "overrides": [f"optimizer.lr={-i}"]}
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    assert len(made) >= 4

    compare.main([str(tmp_path)])
    capsys.readouterr()

    with (tmp_path / "comparison.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["run"] for r in rows) == sorted(HOSTILE[name] for name in made)
    assert all(_inert(r["run"]) for r in rows)
    assert sorted(r["optimizer.lr"] for r in rows) == sorted(made.values())  # negative numbers stay numbers
    assert all(float(r["val/loss"]) == -0.5 for r in rows)

    md = (tmp_path / "comparison.md").read_text()
    assert not CONTROL.search(md.replace("\n", ""))
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(made) and len({_columns(line) for line in table}) == 1


def test_predictions_csv_cells_from_file_and_class_names_are_inert(tmp_path):
    classes = ["=cmd|' /C calc'!A0", "@SUM(A1)", "cat"]
    writer, trainer = CsvWriter(tmp_path, classes, top_k=3), SimpleNamespace(global_rank=0)
    writer.on_predict_start(trainer, None)
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    writer.write_on_batch_end(trainer, None, probs, None, (None, torch.tensor([0, 1])), 0, 0)
    paths = [tmp_path / "=2+5.png", tmp_path / "x\x1b[31mred.png"]
    out = writer.merge(paths, world_size=1)

    with out.open(newline="") as f:
        rows = list(csv.reader(f))
    cells = [c for row in rows for c in row]
    assert all(_inert(c) for c in cells)
    assert rows[1][:2] == [f"{tmp_path}/=2+5.png", "'=cmd|' /C calc'!A0"]  # a path that starts with / is no formula
    assert rows[2][0] == f"{tmp_path}/xred.png" and rows[2][1] == "cat"
    assert [float(p) for p in rows[1][2::2]] == pytest.approx([0.7, 0.2, 0.1])  # probabilities stay numbers
    assert rows[1][3] == "'@SUM(A1)"
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["predictions.csv"]
