"""What a run's files hold is data, never an expression (issue 42, class 3). Every kind of hostile content a run's
files can hold (an alias bomb, nesting far deeper than brisk writes, a file of 10 MB, a FIFO, a link to /dev/zero) is
put into each file brisk reads from a run (.hydra/config.yaml, .hydra/overrides.yaml, summary.json, a checkpoint),
and each reader must end in one line naming the file, within seconds, or skip the run with that line. A saved
`${oc.env:...}` is never resolved: a resume does not print the secret it names. Real files, real FIFOs; no mocks."""

from __future__ import annotations

import ast
import io
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from brisk import compare
from brisk.checkpoints import restore
from brisk.checkpoints.io import peek
from brisk.errors import BriskError
from brisk.utils import run_files
from helpers import FINISHED, TINY, compose_cfg, deadline, main_in_process

EVAL = ["trainer=cpu", *(o for o in TINY if o.startswith("data"))]  # brisk-eval on the tiny runs' data
DEEP = 1000  # ten times what run_files admits, and deep enough that a recursive reader ends in RecursionError


def _alias_bomb(path: Path) -> None:
    # Ten levels of nine aliases each: 9**10 (3.5 billion) strings once expanded, from 1 KB.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path.write_text("\n".join(lines) + "\n")


def _deep(path: Path) -> None:
    text = "[" * DEEP + "]" * DEEP  # as valid JSON as it is YAML
    path.write_text(text if path.suffix == ".json" else f"data: {text}\n")


HOSTILE = {
    "alias_bomb": _alias_bomb,
    "nested_1000_deep": _deep,
    "10_MB": lambda path: path.write_text("x" * (10 << 20)),
    "fifo": lambda path: os.mkfifo(path),
    "link_to_dev_zero": lambda path: path.symlink_to("/dev/zero"),
}
FILES = (".hydra/config.yaml", ".hydra/overrides.yaml", "summary.json")


def _one_line(error: BriskError, path: Path) -> None:
    text = str(error)
    assert "\n" not in text and str(path) in text, text


@pytest.mark.parametrize(
    ("kind", "name"), [(k, n) for k in HOSTILE for n in FILES if (k, n) != ("alias_bomb", "summary.json")]
)  # JSON has no aliases
def test_the_run_file_loader_refuses_each_hostile_file_in_one_line(kind, name, tmp_path):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    HOSTILE[kind](path)
    load = run_files.load_json if name.endswith(".json") else run_files.load_yaml
    with deadline(10), pytest.raises(BriskError) as refused:
        load(path)
    _one_line(refused.value, path)


@pytest.mark.parametrize("kind", HOSTILE)
def test_eval_refuses_a_hostile_run_config_in_one_line(kind, tmp_path, brisk_root):
    # brisk-eval, predict and export read the run's config through restore.run_config before anything is built.
    cfg = compose_cfg([*EVAL, "ckpt_path=unused"], brisk_root, config_name="eval")
    config = tmp_path / "run" / ".hydra" / "config.yaml"
    config.parent.mkdir(parents=True)
    HOSTILE[kind](config)
    with deadline(10), pytest.raises(BriskError) as refused:
        restore.with_run_config(cfg, tmp_path / "run" / "checkpoints" / "last.ckpt")
    _one_line(refused.value, config)


def test_compare_skips_the_runs_whose_files_are_hostile_naming_each(finished_run, tmp_path, capsys, caplog):
    runs = tmp_path / "runs"
    shutil.copytree(finished_run / ".hydra", runs / "good" / ".hydra")
    shutil.copy(finished_run / "summary.json", runs / "good")
    for kind, make in HOSTILE.items():
        for name in ("overrides.yaml", "summary.json"):
            run = runs / f"{kind}-{name}"
            shutil.copytree(runs / "good", run)
            (run / ".hydra" / name if name.endswith(".yaml") else run / name).unlink()
            if not (kind == "alias_bomb" and name == "summary.json"):
                make(run / ".hydra" / name if name.endswith(".yaml") else run / name)
    with deadline(30):
        compare.main([str(runs)])
    assert capsys.readouterr().out.splitlines()[-1] == str(runs)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    for kind in HOSTILE:
        overrides = runs / f"{kind}-overrides.yaml" / ".hydra" / "overrides.yaml"
        assert sum(str(overrides) in w and "Using summary.json's overrides" in w for w in warnings) == 1, kind
        if kind != "alias_bomb":
            summary = runs / f"{kind}-summary.json" / "summary.json"
            assert sum(str(summary) in w and "skipped" in w for w in warnings) == 1, kind
    table = (runs / "comparison.csv").read_text()
    assert all(f"{kind}-overrides.yaml" in table and f"{kind}-summary.json," not in table for kind in HOSTILE)


def _deep_checkpoint(path: Path) -> None:
    """A real checkpoint archive whose hyper_parameters.net is a list nested DEEP * 100 levels: pickle opcodes
    written by hand, since torch.save itself cannot pickle anything that deep."""
    depth = DEEP * 100
    key = lambda text: b"X" + len(text).to_bytes(4, "little") + text  # noqa: E731 (BINUNICODE)
    data = b"\x80\x02}" + key(b"hyper_parameters") + b"}" + key(b"net") + b"]" * depth + b"a" * (depth - 1) + b"ss."
    plain = io.BytesIO()
    torch.save({}, plain)
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(path, "w") as crafted:
        for item in source.infolist():
            crafted.writestr(item, data if item.filename.endswith("/data.pkl") else source.read(item))


def test_a_checkpoint_nested_too_deep_is_one_line_naming_it(tmp_path, brisk_root):
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    _deep_checkpoint(ckpt)
    with deadline(30), pytest.raises(BriskError) as refused:
        peek(ckpt)  # what resume and eval read a checkpoint's hyperparameters with
    _one_line(refused.value, ckpt)
    # eval without the run's config: the model from those hyperparameters
    cfg = compose_cfg([*EVAL, "ckpt_path=unused"], brisk_root, config_name="eval")
    with deadline(30), pytest.raises(BriskError) as refused:
        restore.with_run_config(cfg, ckpt)
    _one_line(refused.value, ckpt)


def test_a_resume_never_resolves_a_saved_interpolation(finished_run, tmp_path, brisk_root, capsys, caplog, monkeypatch):
    monkeypatch.setenv("BRISK_TEST_SECRET", "hunter2")
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    config = run / ".hydra" / "config.yaml"
    saved = config.read_text()
    root = next(line for line in saved.splitlines() if line.startswith("  root: "))
    config.write_text(saved.replace(root, "  root: ${oc.env:BRISK_TEST_SECRET}", 1))
    status = main_in_process("train", [*FINISHED, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"], brisk_root)
    out, err = capsys.readouterr()
    said = out + err + caplog.text
    assert status == 2 and "${oc.env:BRISK_TEST_SECRET}" in said, said[-2000:]  # refused, showing what the file says
    assert "hunter2" not in said


def test_no_module_but_run_files_parses_yaml_or_json():
    """The class's root: a new reader of a run's files that parses them itself would bypass every bound above.
    brisk.data.cache_meta reads its own cache's meta.json, which no run writes; brisk.search.report the trial that
    its job put in the environment of a DDP trial's rank (BRISK_TRIAL), no file at all."""
    allowed = {"utils/run_files.py", "data/cache_meta.py", "search/report.py"}
    parsers = {("yaml", "load"), ("yaml", "safe_load"), ("yaml", "full_load"), ("yaml", "unsafe_load")}
    parsers |= {("OmegaConf", "load"), ("json", "load"), ("json", "loads")}
    src = Path(run_files.__file__).parents[1]
    found = []
    for module in src.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            call = node.func if isinstance(node, ast.Call) else None
            name = (
                (call.value.id, call.attr)
                if isinstance(call, ast.Attribute) and isinstance(call.value, ast.Name)
                else None
            )
            if name in parsers and module.relative_to(src).as_posix() not in allowed:
                found.append(f"{module.relative_to(src)}:{node.lineno} {'.'.join(name)}")
    assert found == []
