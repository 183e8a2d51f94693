"""`make rename NAME=<new>` (scripts/rename.py) on copies of the project: refusals, the rename, the undo."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import brisk
from helpers import TINY, tree
from project_copy import borrowing_venv, clean_env, copy_project, pip_install, rename

OLD = Path(brisk.__file__).parent.name
# Spelled apart: the rename refuses a name that the project's files already contain, this one included.
NEW = "_".join(["acme", "vision"])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return copy_project(tmp_path_factory.mktemp("pristine"))


@pytest.mark.parametrize(
    "name, says",
    [
        ("", "give the new name"),
        ("2fast", "not a Python identifier"),
        ("my-net", "not a Python identifier"),
        ("class", "keyword"),
        ("MyNet", "capitals"),
        (OLD, "already called"),
        ("torch", "installed module"),  # import torch would find the real one
        ("json", "installed module"),
        ("trainer", "already appears in"),  # a later rename could not tell the two apart
    ],
)
def test_refuses_bad_names_in_one_line_and_changes_nothing(name, says, pristine, capsys):
    before = tree(pristine)
    assert rename.main([name, "--root", str(pristine)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rename: error: ") and says in err and err.count("\n") == 1
    assert tree(pristine) == before


def test_rename_leaves_no_trace_of_the_old_name(tmp_path, capsys):
    root = copy_project(tmp_path)
    assert rename.main([NEW, "--root", str(root)]) == 0, capsys.readouterr().err
    old = re.compile(OLD, re.IGNORECASE)
    for file in sorted(p for p in root.rglob("*") if p.is_symlink() or p.is_file()):
        path = str(file.relative_to(root))
        assert not old.search(path), path
        try:
            text = os.readlink(file) if file.is_symlink() else file.read_text()
        except UnicodeDecodeError:
            continue  # not text (the checkpoint of tests/fixtures): the rename leaves such files as they are
        assert not old.search(text), f"{path}: {old.search(text).group()}"
        if path.endswith(".py"):
            compile(text, path, "exec")
    package = root / "src" / NEW
    assert (package / "__init__.py").is_file() and not (root / "src" / OLD).exists()
    assert (package / "conf").resolve() == (root / "conf").resolve()  # the link moved with its folder
    pyproject = (root / "pyproject.toml").read_text()
    assert f'{NEW}-train = "{NEW}.train:main"' in pyproject and f'name = "{NEW}"' in pyproject
    assert f"_target_: {NEW}.run.rundir.RunDirCallback" in (root / "conf" / "hydra" / "default.yaml").read_text()
    assert f"class {''.join(w.title() for w in NEW.split('_'))}Error" in (package / "errors.py").read_text()


def test_a_failure_midway_puts_everything_back(tmp_path):
    root = copy_project(tmp_path)
    before = tree(root)
    plan = rename.plan(root, NEW)
    assert len(plan.contents) > 20
    # The folder appears after the checks (another process, say): the swap stops at it and undoes its work.
    (root / "src" / NEW).mkdir()
    (root / "src" / NEW / "keep.txt").write_text("theirs")
    with pytest.raises(rename.RenameError, match="every change was undone"):
        rename.apply(plan)
    (root / "src" / NEW / "keep.txt").unlink()
    (root / "src" / NEW).rmdir()
    assert tree(root) == before  # no file changed, and no staged file left behind


@pytest.mark.slow
def test_renamed_copy_installs_and_trains(tmp_path, project):
    root = copy_project(tmp_path / "project")
    subprocess.run([sys.executable, "scripts/rename.py", NEW], cwd=root, check=True, env=clean_env())
    python = borrowing_venv(tmp_path / "venv")
    pip_install(python, "-e", str(root))
    proc = subprocess.run(
        [python.parent / f"{NEW}-train", *TINY, "trainer.max_epochs=1"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(**{f"{NEW.upper()}_ROOT": str(project), "BRISK_ROOT": str(project)}),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert (run_dir / "summary.json").is_file() and run_dir.is_relative_to(project)
    assert f"path: {(root / 'conf').resolve()}" in (run_dir / ".hydra" / "hydra.yaml").read_text()
