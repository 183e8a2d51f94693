"""A copy of this project, as a fresh clone would have it, and a bare venv that borrows the installed packages.

For the tests that change the project (rename, remove the lab) or install it (wheel): they work on a copy,
never on the checkout, and install without downloading anything (torch alone is gigabytes).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# scripts/ is not a package: load the rename script by its path (its dataclasses need it in sys.modules).
_spec = importlib.util.spec_from_file_location("rename_script", ROOT / "scripts" / "rename.py")
rename = sys.modules.setdefault("rename_script", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(rename)


def copy_project(dest: Path) -> Path:
    """The project's files (what git tracks or would track), links kept as links."""
    for path in rename.project_files(ROOT):
        target = dest / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, target)
    return dest


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without PYTHONPATH (the tests' own sources must not leak into an installed copy)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1", **extra}


def borrowing_venv(where: Path) -> Path:
    """A new venv without pip whose site-packages reads this interpreter's (torch, lightning, ...) after its own.

    A .pth line adds a folder to sys.path without running that folder's own .pth files, so an editable
    install of this checkout in the borrowed environment stays invisible."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shared = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (Path(own) / "borrowed.pth").write_text("".join(f"{p}\n" for p in sorted(shared)))
    return python


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess:
    """This interpreter's pip, installing into `python`'s venv: offline, no dependencies, no build isolation."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--ignore-installed",
            "--no-build-isolation",
            *args,
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=True,
    )
