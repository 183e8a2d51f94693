"""Inputs that hang or blow up brisk-compare and resume (issue 42, class 5): a FIFO or a link to /dev/zero where a
summary or a checkpoint belongs, numbers no float holds, and more runs than one plot can draw. brisk-compare must
finish within seconds, keep every readable run and name each one it skips or trims; a resume must refuse a
checkpoint that is not a regular file in one line, before Lightning opens it. Real FIFOs and links; no mocks."""

from __future__ import annotations

import csv
import json
import os
import shutil
import time

import pytest

from brisk import compare
from helpers import FINISHED, deadline, main_in_process


def _summary(folder, text: str, overrides=("data=synthetic",)) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (folder / "summary.json").write_text(text)


def test_compare_finishes_over_summaries_that_block_or_overflow(tmp_path, capsys, caplog):
    runs = tmp_path / "runs"
    _summary(runs / "good", json.dumps({"metrics": {"test/acc": 0.5}, "fit_seconds": 3.0}))
    # json reads 10**400 as an int, which float() (isfinite, the plot, the table) cannot hold; NaN is Python's JSON
    _summary(runs / "huge", '{"metrics": {"test/acc": 1' + "0" * 400 + '}, "fit_seconds": 4.0}')
    _summary(runs / "nan", '{"metrics": {"test/acc": NaN}, "fit_seconds": -Infinity}')
    for name, make in {"fifo": os.mkfifo, "zero": lambda p: p.symlink_to("/dev/zero")}.items():
        (runs / name).mkdir()
        make(runs / name / "summary.json")
    with deadline(20):
        compare.main([str(runs)])
    assert capsys.readouterr().out.splitlines()[-1] == str(runs)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    for name, says in [("fifo", "a FIFO"), ("zero", "a device")]:
        assert sum(str(runs / name / "summary.json") in w and says in w for w in warnings) == 1, warnings
    assert any(w.startswith("huge: left out test/acc") for w in warnings), warnings
    assert any(w.startswith("nan: left out test/acc, fit_seconds") for w in warnings), warnings
    rows = {r["run"]: r for r in csv.DictReader((runs / "comparison.csv").open())}
    assert sorted(rows) == ["good", "huge", "nan"]  # the trimmed runs stay, with what they hold that is a number
    assert rows["huge"]["test/acc"] == "" and rows["huge"]["fit_seconds"] == "4.0" and rows["good"]["test/acc"] == "0.5"
    assert (runs / "comparison.png").is_file()


def test_compare_of_many_runs_drops_the_plot_and_says_so(tmp_path, capsys, caplog):
    runs = tmp_path / "runs"
    for i in range(400):
        summary = {"metrics": {"test/acc": i / 400}, "fit_seconds": float(i)}
        _summary(runs / str(i), json.dumps(summary), [f"optimizer.lr={i}"])
    start = time.perf_counter()
    with deadline(60):
        compare.main([str(runs)])
    took = time.perf_counter() - start
    out = capsys.readouterr().out.splitlines()
    assert out == [str(runs / "comparison.csv"), str(runs / "comparison.md"), str(runs)]
    assert "comparison.png skipped: 400 runs are more than one plot shows" in caplog.text
    assert not (runs / "comparison.png").exists() and (runs / "comparison.md").read_text().count("\n| ") == 401
    assert took < 20, f"{took:.1f} s for 400 runs"


def test_compare_shows_a_quoted_override_without_its_quotes(tmp_path, capsys):
    # Issue 41, item 7: `precision='16-mixed'` as typed on a command line showed as '16-mixed' in the table.
    runs = tmp_path / "runs"
    for name, given in [("a", "precision='16-mixed'"), ("b", 'precision="32-true"'), ("c", "precision=bf16-mixed")]:
        _summary(runs / name, json.dumps({"metrics": {"test/acc": 0.5}}), [given, "data=synthetic"])
    compare.main([str(runs)])
    rows = list(csv.DictReader((runs / "comparison.csv").open()))
    assert [r["precision"] for r in rows] == ["16-mixed", "32-true", "bf16-mixed"]
    assert "| a | 16-mixed |" in (runs / "comparison.md").read_text()


def _fifo(run):
    os.mkfifo(run / "checkpoints" / "elsewhere.ckpt")
    return run / "checkpoints" / "elsewhere.ckpt"


def _newer_last_fifo(run):
    # Lightning's ckpt_path=last is the newest last*.ckpt: a FIFO beside the real last.ckpt is the one it opens
    os.mkfifo(run / "checkpoints" / "last-v1.ckpt")
    return "last"


def _last_to_dev_zero(run):
    (run / "checkpoints" / "last.ckpt").unlink()
    (run / "checkpoints" / "last.ckpt").symlink_to("/dev/zero")
    return "last"


BLOCKING = {
    "fifo": (_fifo, "a FIFO"),
    "newer_last_fifo": (_newer_last_fifo, "a FIFO"),
    "dev_zero": (_last_to_dev_zero, "a device"),
}


@pytest.mark.parametrize("case", BLOCKING)
def test_a_resume_refuses_a_checkpoint_that_is_not_a_regular_file(case, finished_run, tmp_path, brisk_root, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    make, says = BLOCKING[case]
    ckpt_path = make(run)
    with deadline(60):
        status = main_in_process("train", [*FINISHED, f"ckpt_path={ckpt_path}", f"hydra.run.dir={run}"], brisk_root)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("brisk: error:")]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert says in lines[0] and "not a regular file" in lines[0] and str(run / "checkpoints") in lines[0], lines[0]


@pytest.mark.parametrize("command, args", [("train", FINISHED), ("evaluate", []), ("predict", []), ("export", [])])
def test_a_run_folder_given_as_the_checkpoint_names_the_checkpoints_in_it(
    command, args, finished_run, brisk_root, capsys
):
    # A new user's first guess: the run directory itself. Each command names a file in it, not "restore it".
    inputs = [f"inputs={finished_run}"] if command == "predict" else []  # its plots are images to predict
    status = main_in_process(command, [*args, *inputs, f"ckpt_path={finished_run}"], brisk_root)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("brisk: error:")]
    assert status == 2 and len(lines) == 1, lines
    assert f"ckpt_path={finished_run} is a folder" in lines[0] and str(finished_run / "checkpoints") in lines[0]
