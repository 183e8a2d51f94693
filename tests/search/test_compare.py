"""brisk-compare <folder>: every summary.json below a folder in one table (CSV, Markdown) and a plot."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from brisk import compare


def _run(folder, overrides: list[str], summary: dict) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (folder / "summary.json").write_text(json.dumps(summary))


def test_runs_below_a_folder_side_by_side(finished_run, tmp_path, capsys, caplog):
    shutil.copytree(finished_run / ".hydra", tmp_path / "runs" / "real" / ".hydra")  # a real run's summary
    shutil.copy(finished_run / "summary.json", tmp_path / "runs" / "real")
    common = ["data=synthetic", "trainer.max_epochs=1"]
    for n, lr in [(2, "0.1"), (10, "0.01")]:
        extra = {"per_class": {"f1": [0.5, 0.7]}, "confusion": [[1, 0], [0, 1]]}  # lists: left out
        summary = {"metrics": {"test/acc": 0.5 + n / 100, "val/acc_best": 0.6}, "fit_seconds": 10.0 * n, **extra}
        _run(tmp_path / "runs" / "sweep" / str(n), [*common, f"optimizer.lr={lr}"], summary)
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "summary.json").write_text('{"metrics": {"test/acc": 0.')  # cut short

    compare.main([str(tmp_path / "runs")])
    out = capsys.readouterr().out.splitlines()
    folder = tmp_path / "runs"
    assert out == [str(folder / n) for n in ("comparison.csv", "comparison.md", "comparison.png")] + [str(folder)]
    assert "broken/summary.json: skipped, not a readable summary" in caplog.text
    rows = list(csv.DictReader((folder / "comparison.csv").open()))
    assert [r["run"] for r in rows] == ["real", "sweep/2", "sweep/10"]  # job 10 after job 2
    assert [r["optimizer.lr"] for r in rows] == ["", "0.1", "0.01"]  # the overrides that differ, as columns
    real = json.loads((finished_run / "summary.json").read_text())
    assert float(rows[0]["test/acc"]) == real["metrics"]["test/acc"] and float(rows[2]["fit_seconds"]) == 100
    assert "data" not in rows[0], "an override every run shares is no column"
    assert not any(k.startswith(("per_class", "confusion", "class_names")) for k in rows[0])
    md = (folder / "comparison.md").read_text()
    assert "| run |" in md and "| sweep/10 | " in md and "optimizer.lr" in md and md.count("\n| ") == 4
    assert (folder / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("content", [None, "not json"])
def test_a_folder_without_a_readable_summary_is_one_line(tmp_path, capsys, content):
    if content is not None:
        (tmp_path / "summary.json").write_text(content)
    with pytest.raises(SystemExit) as stop:
        compare.main([str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err[-1].startswith("brisk: error: ") and "no readable summary.json" in err[-1]
    assert not list(tmp_path.glob("comparison.*"))
