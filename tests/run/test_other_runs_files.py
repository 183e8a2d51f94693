"""A run never lands on another run's files: a directory that holds a run's record, checkpoints or summary is
refused in one line naming it, before anything is written, unless the command resumes that very run from a
checkpoint in it (brisk.run.rundir.claim)."""

from __future__ import annotations

import shutil

import pytest

from brisk.run import rundir
from helpers import FINISHED, assert_user_error, brisk_train, read_summary, run_cli, tree


def _copy(finished_run, to):
    shutil.copytree(finished_run, to)
    return to


# What lands on run `b` (a copy of a finished run; `a` is another copy): the overrides, and what the line says.
LANDINGS = {
    "new_run": (lambda a, b: ["seed=7", f"hydra.run.dir={b}"], "holds another run's files"),
    "resume_of_another_run": (
        lambda a, b: [f"ckpt_path={a / 'checkpoints' / 'last.ckpt'}", f"hydra.run.dir={b}"],
        "holds another run's files",
    ),
    "resume_under_another_seed": (lambda a, b: ["seed=7", "ckpt_path=last", f"hydra.run.dir={b}"], "seed: 42 -> 7"),
}


@pytest.mark.parametrize("case", LANDINGS, ids=list(LANDINGS))
def test_a_run_that_lands_on_another_runs_files_is_refused_and_they_stay(
    case, finished_run, tmp_path, brisk_root, capsys, monkeypatch
):
    a, b = _copy(finished_run, tmp_path / "a"), _copy(finished_run, tmp_path / "b")
    before = tree(tmp_path)
    overrides, says = LANDINGS[case]
    proc = brisk_train([*FINISHED, *overrides(a, b)], brisk_root, capsys, monkeypatch)
    assert_user_error(proc, str(b), says)
    assert tree(tmp_path) == before  # byte for byte: no checkpoint, summary, record or log line written


def test_an_empty_or_unrelated_folder_takes_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    rundir.claim(tmp_path / "empty", None)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("mine")
    rundir.claim(tmp_path / "notes", None)  # brisk's names do not collide with it
    (tmp_path / "notes" / "checkpoints").mkdir()
    (tmp_path / "notes" / "checkpoints" / "epoch=0.ckpt").write_bytes(b"")
    with pytest.raises(rundir.BriskError, match="checkpoints/epoch=0.ckpt"):
        rundir.claim(tmp_path / "notes", None)


@pytest.mark.slow  # a 2-job sweep in a subprocess: one real epoch, then the refusal (~30 s on 2 cores)
def test_sweep_jobs_given_the_same_folder_do_not_replace_each_other(project):
    args = ["-m", *FINISHED, "seed=1,2", "hydra.sweep.subdir=same", f"hydra.sweep.dir={project / 'sweep'}"]
    proc = run_cli("train", args, project, check=False)
    job = project / "sweep" / "same"
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"brisk: error: {job} holds another run's files" in proc.stderr
    assert read_summary(job)["seed"] == 1  # job 1's summary, not replaced by job 2's
    assert "\nseed: 1\n" in (job / ".hydra" / "config.yaml").read_text()
    assert not (job / ".hydra" / "resume-1").exists()  # job 2 recorded nothing
