"""The speed lab (brisk-bench) is a package of its own beside brisk: the template neither lists, imports nor names
it, the lab uses only brisk's public API (`brisk.__all__`), and removing it is deleting one folder and one line."""

from __future__ import annotations

import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import brisk
from brisk.cli import CONFIG_PATH
from helpers import TINY
from project_copy import ROOT, borrowing_venv, clean_env, copy_project

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

PACKAGE = Path(brisk.__file__).parent.name
LAB = f"{PACKAGE}_lab"
# Removing the lab is exactly this: the folder, and the console script's line in pyproject.toml.
LAB_FOLDER = Path("src") / LAB
LAB_LINE = f'{PACKAGE}-bench = "{LAB}.bench:main"'


def scripts(root: Path) -> dict[str, str]:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]


# A project that removed the lab has no brisk-bench: then there is nothing of the lab to test.
needs_lab = pytest.mark.skipif(f"{PACKAGE}-bench" not in scripts(ROOT), reason="this project has no speed lab")


def mentions_of_the_lab(root: Path) -> list[tuple[str, str]]:
    """(file, line) for every line of the template (src/ but the lab's folder, conf/, pyproject.toml) naming the lab."""
    files = {p.resolve(): p for top in ("src", "conf") for p in (root / top).rglob("*") if p.is_file()}
    files[(root / "pyproject.toml").resolve()] = root / "pyproject.toml"
    return [
        (str(path.relative_to(root)), line.strip())
        for path in sorted(files.values())
        if (root / LAB_FOLDER) not in path.parents and path.suffix in (".py", ".yaml", ".toml")
        for line in path.read_text().splitlines()
        if LAB in line
    ]


def test_brisk_train_lists_only_the_groups_it_uses():
    """`brisk-train --help` lists every group of its config folder; the lab's presets were among them."""
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        listed = set(GlobalHydra.instance().config_loader().list_groups(""))
    used = {
        str(d).split()[-1] if isinstance(d, str) else next(iter(d)).split()[-1]
        for d in OmegaConf.load(Path(CONFIG_PATH) / "train.yaml").defaults
    }
    assert listed <= used, f"groups brisk-train lists but cannot use: {sorted(listed - used)}"


def test_import_brisk_stays_light_and_serves_its_public_api():
    """The public names load on first use: `import brisk` (every entry point's first import) costs no torch."""
    code = "import sys, brisk; print(sorted(m for m in ('torch', 'lightning', 'hydra') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout
    assert brisk.__all__
    for name in brisk.__all__:
        assert getattr(brisk, name).__name__, name  # each resolves to the function or class it names
    with pytest.raises(AttributeError, match="no_such_name"):
        brisk.no_such_name  # noqa: B018


@needs_lab
def test_the_lab_is_one_folder_beside_brisk_and_one_pyproject_line():
    assert scripts(ROOT)[f"{PACKAGE}-bench"] == f"{LAB}.bench:main"
    bench = importlib.import_module(f"{LAB}.bench")
    assert callable(bench.main) and Path(bench.__file__).parent == ROOT / LAB_FOLDER
    assert mentions_of_the_lab(ROOT) == [("pyproject.toml", LAB_LINE)]


@needs_lab
def test_the_lab_imports_only_the_public_api_of_brisk():
    """Only `from brisk import <name of brisk.__all__>`: brisk's modules may move without breaking the lab."""
    public = set(brisk.__all__)
    sources = sorted((ROOT / LAB_FOLDER).rglob("*.py"))
    assert len(sources) > 10, f"the lab's modules are not in {LAB_FOLDER}"
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                assert not [a.name for a in node.names if a.name.split(".")[0] == PACKAGE], f"{where}: import {PACKAGE}"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == PACKAGE:
                names = {a.name for a in node.names}
                assert node.module == PACKAGE, f"{where}: from {node.module} import ...; use `from {PACKAGE} import`"
                assert names <= public, f"{where}: {sorted(names - public)} are not in {PACKAGE}.__all__"


# Run in the copy, by its own interpreter: every module of the template imports without the lab, and
# brisk-train (argv: its overrides) trains in the same process, its run directory the last line printed.
IMPORT_ALL_THEN_TRAIN = f"""
import importlib.util, json, pkgutil, sys
import {PACKAGE}
from hydra import compose, initialize_config_dir
from {PACKAGE}.cli import CONFIG_PATH
modules = [m.name for m in pkgutil.walk_packages({PACKAGE}.__path__, "{PACKAGE}.")]
for name in modules:
    importlib.import_module(name)
with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
    data = {PACKAGE}.registry.DATASETS.get(compose("train", overrides=["data=synthetic"]).data.type).__name__
print("found:", json.dumps(dict(package={PACKAGE}.__file__, lab=importlib.util.find_spec("{LAB}") is not None,
                      loaded=sorted(m for m in sys.modules if m.startswith("{LAB}")), modules=len(modules), data=data)))
sys.argv[0] = "{PACKAGE}-train"
importlib.import_module("{PACKAGE}.train").main()
"""


@pytest.mark.slow  # a copy of the project, a venv and a 1-epoch run (~20 s)
@needs_lab
def test_removing_the_lab_folder_and_its_line_leaves_a_working_template(tmp_path, project):
    root = copy_project(tmp_path / "copy")
    shutil.rmtree(root / LAB_FOLDER)
    pyproject = root / "pyproject.toml"
    lines = pyproject.read_text().splitlines(keepends=True)
    assert [line.strip() for line in lines].count(LAB_LINE) == 1
    pyproject.write_text("".join(line for line in lines if line.strip() != LAB_LINE))
    assert mentions_of_the_lab(root) == []
    # A venv that borrows the installed packages but not this checkout's editable install (which would still
    # find the lab), with the copy's sources first: absolute, or a subprocess would import the checkout.
    python = borrowing_venv(tmp_path / "venv")
    env = clean_env(PYTHONPATH=str((root / "src").resolve()), BRISK_ROOT=str(project), OMP_NUM_THREADS="1")
    args = [*TINY, "trainer.max_epochs=1", "callbacks.progress_bar=null"]
    proc = subprocess.run(
        [python, "-c", IMPORT_ALL_THEN_TRAIN, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    found = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("found: "))[7:])
    assert Path(found["package"]).is_relative_to(root) and not found["lab"] and found["loaded"] == []
    assert found["modules"] > 30 and found["data"].endswith("DataModule")
    summary = json.loads((Path(proc.stdout.strip().splitlines()[-1]) / "summary.json").read_text())
    assert summary["epochs"] == 1

    # The lab's own tests skip themselves, and this module's other tests still pass.
    tests = ["tests/project/test_bench.py", "tests/project/test_lab_boundary.py"]
    proc = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *tests],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "this project has no speed lab" in proc.stdout, proc.stdout[-3000:]
