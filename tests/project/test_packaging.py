"""brisk as a package: what it imports is declared, and a wheel installed elsewhere trains with its own configs."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import brisk
from helpers import TINY
from project_copy import ROOT, borrowing_venv, clean_env, copy_project, pip_install

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

PACKAGE = Path(brisk.__file__).parent.name


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return {canonicalize_name(Requirement(r).name): Requirement(r) for r in lines}


def imported_modules() -> dict[str, str]:
    """Top-level modules that the code under src/ (brisk, the lab, the sweeper plugin) imports -> one file that does."""
    found = {}
    for path in sorted((ROOT / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    own = {p.name for p in (ROOT / "src").iterdir()}
    return {m: f for m, f in found.items() if m not in sys.stdlib_module_names and m not in {*own, "__main__"}}


def test_every_imported_package_is_declared():
    """numpy and PIL were imported but not declared: an install that lacked them broke at import."""
    distributions = importlib.metadata.packages_distributions()
    names = set(declared())
    missing = {
        module: where
        for module, where in imported_modules().items()
        if not {canonicalize_name(d) for d in distributions.get(module, [module])} & names
    }
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_lightning_floor_and_ceiling():
    """2.6.4 and 2.6.5 import the _instantiator path a checkpoint names; brisk.compat was checked on 2.6.x."""
    spec = declared()["lightning"].specifier
    assert "2.6.6" in spec and "2.6.5" not in spec and "2.7.0" not in spec


def test_wheel_installed_elsewhere_trains_with_a_config_dir_of_its_own(tmp_path, project):
    """The wheel carries conf/; installed (not editable) and run from another folder it trains, and a user's
    --config-dir adds options. The build uses the SPDX license string: no setuptools deprecation warning."""
    source = copy_project(tmp_path / "source")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "-v", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-w", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert not re.findall(r"(?i).*deprecat.*", build.stdout + build.stderr)  # the license table was, until 2027
    wheel = next((tmp_path / "dist").glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
        metadata = z.read(next(f for f in files if f.endswith(".dist-info/METADATA"))).decode()
    assert {f"{PACKAGE}/conf/train.yaml", f"{PACKAGE}/conf/data/synthetic.yaml"} <= files
    configs = {str(p.relative_to(source / "src")) for p in (source / "src").glob("*/conf/**/*.yaml")}  # the lab's too
    assert f"{PACKAGE}/conf/train.yaml" in configs and configs <= files
    assert "License-Expression: MIT" in metadata

    python = borrowing_venv(tmp_path / "venv")
    pip_install(python, str(wheel))
    user_conf = tmp_path / "my_conf"
    (user_conf / "experiment").mkdir(parents=True)
    (user_conf / "experiment" / "one_epoch.yaml").write_text("# @package _global_\ntrainer:\n  max_epochs: 1\n")
    start = time.time()
    proc = subprocess.run(
        [python.parent / f"{PACKAGE}-train", "--config-dir", str(user_conf), "experiment=one_epoch", *TINY],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(BRISK_ROOT=str(project)),
    )
    wall = time.time() - start
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert run_dir.parent == project / "logs" / "train" / "runs"
    hydra_yaml = (run_dir / ".hydra" / "hydra.yaml").read_text()
    assert f"{tmp_path / 'venv'}/lib/" in hydra_yaml and f"path: {user_conf}" in hydra_yaml  # the packaged conf
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["epochs"] == 1
    assert 0 < summary["startup_seconds"] < wall  # from the process's start (not the boot, not the first import)
