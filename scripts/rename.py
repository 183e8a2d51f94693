#!/usr/bin/env python3
"""Rename the project: `make rename NAME=<new>` (or `python scripts/rename.py <new>`).

The package folder (src/<old> -> src/<new>), imports, `_target_`s, console scripts (<new>-train, ...),
pyproject metadata, Makefile, tests, scripts and README: every whole-word use of the old name in the
project's text files, in its three spellings: brisk, BRISK (BRISK_ROOT) and Brisk (BriskError) become
the new name in lower case, upper case and CamelCase. Prose included: nothing that names the project
keeps the old name; the git history does. The new name must appear nowhere yet, so that a later rename
finds only what this one wrote.

It cannot half-run. It reads and checks everything first (the name, every file, the target folder),
then writes every new file next to its original, then swaps them in with renames; if anything fails
on the way, it puts back what it had swapped and says so. Standard library only: it runs before any
virtual environment exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import keyword
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# Where the project is not a git checkout, folders never read: at the top, environments, data, run outputs and
# builds; anywhere, caches.
SKIP_TOP = {".git", ".venv", "venv", "data", "logs", "outputs", "multirun", "build", "dist"}
SKIP_ANYWHERE = ("__pycache__", ".egg-info", "_cache")


class RenameError(Exception):
    """Why the rename did not happen (or was rolled back); one line."""


@dataclass
class Plan:
    root: Path
    old: str
    new: str
    contents: dict[Path, tuple[str, str]] = field(default_factory=dict)  # file -> (old text, new text)
    moves: list[tuple[Path, Path]] = field(default_factory=list)  # deepest first


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def spellings(name: str) -> list[tuple[re.Pattern, str]]:
    """The whole-word patterns of a name: lower case, upper case (env vars), CamelCase (class names)."""

    def word(text: str, after: str) -> re.Pattern:
        # After a letter or digit it is part of another word, unless the letter ends an escape such as \n.
        return re.compile(rf"(?:(?<![A-Za-z0-9])|(?<=\\[nrt])){re.escape(text)}(?![{after}])")

    return [
        (word(name, "A-Za-z0-9"), name),
        (word(name.upper(), "A-Za-z0-9"), name.upper()),
        (word(camel(name), "a-z0-9"), camel(name)),  # BriskError: an upper-case letter may follow
    ]


def current_name(root: Path) -> str:
    found = [p.parent.name for p in (root / "src").glob("*/__init__.py")]
    # Packages built on the project are named after it (the lab: src/<name>_lab) and renamed with it.
    packages = [name for name in found if not any(name.startswith(f"{other}_") for other in found)]
    if len(packages) != 1:
        raise RenameError(f"expected one package folder in {root / 'src'}, found {packages or 'none'}")
    return packages[0]


def project_files(root: Path) -> list[Path]:
    """The files git tracks or would track (untracked, not ignored); outside git, all but SKIP_TOP/SKIP_ANYWHERE."""
    if (root / ".git").exists():
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
        files = [root / f for f in out.decode().split("\0") if f]
    else:
        files = []
        for folder, dirs, names in os.walk(root):
            top = Path(folder) == root
            dirs[:] = [d for d in dirs if not (top and d in SKIP_TOP) and not d.endswith(SKIP_ANYWHERE)]
            files += [Path(folder) / n for n in names]
    return sorted(f for f in files if f.is_symlink() or f.is_file())


def dependency_modules(root: Path) -> set[str]:
    """The import names the project's dependencies (probably) use: torch, lightning, hydra (hydra-core), ...

    Read from pyproject.toml, for when this runs in a Python that has none of them installed yet."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    names = re.findall(r'"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*[<>=!~]', text)
    return {m for n in names for m in (n.lower().replace("-", "_").replace(".", "_"), n.lower().split("-")[0])}


def check_name(new: str, old: str, taken: set[str] = frozenset()) -> None:
    if not new:
        raise RenameError("give the new name: make rename NAME=<new_name>")
    if not new.isidentifier() or not new.isascii():
        raise RenameError(f"'{new}' is not a Python identifier: use lower-case letters, digits and _")
    if keyword.iskeyword(new) or keyword.issoftkeyword(new):
        raise RenameError(f"'{new}' is a Python keyword: pick another name")
    if new != new.lower():
        raise RenameError(f"'{new}' has capitals: package names are lower case (PEP 8), e.g. {new.lower()}")
    if new == old:
        raise RenameError(f"the project is already called {old}")
    if new in sys.stdlib_module_names or new in taken or importlib.util.find_spec(new) is not None:
        raise RenameError(f"'{new}' is the name of an installed module: `import {new}` would find that one instead")


def plan(root: Path, new: str) -> Plan:
    """Read and check everything; change nothing."""
    root = root.resolve()
    old = current_name(root)
    check_name(new, old, dependency_modules(root))
    result = Plan(root, old, new)
    olds, news = spellings(old), spellings(new)
    texts: dict[Path, str] = {}
    files = project_files(root)  # git ls-files: once
    for path in files:
        if path.is_symlink():
            continue  # its target is a project file of its own (src/<name>/conf -> conf)
        try:
            texts[path] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text: images and the like hold no names
        except OSError as e:
            raise RenameError(f"cannot read {path.relative_to(root)}: {e.strerror}") from None
    for path, text in texts.items():
        for pattern, _ in news:
            if match := pattern.search(text):
                line = text.count("\n", 0, match.start()) + 1
                raise RenameError(
                    f"'{new}' already appears in {path.relative_to(root)}:{line}; a later rename could not tell "
                    "it from the project's name. Pick a name that appears nowhere yet"
                )
        changed = text
        for (pattern, _), (_, replacement) in zip(olds, news, strict=True):
            changed = pattern.sub(replacement, changed)
        if changed != text:
            if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
                raise RenameError(f"cannot write {path.relative_to(root)} (or its folder)")
            result.contents[path] = (text, changed)
    moves = set()
    for path in files:
        parts = path.relative_to(root).parts
        for i, part in enumerate(parts):
            renamed = olds[0][0].sub(new, part)
            if renamed != part:
                moves.add((root.joinpath(*parts[: i + 1]), root.joinpath(*parts[:i], renamed)))
    result.moves = sorted(moves, key=lambda m: len(m[0].parts), reverse=True)
    for _, target in result.moves:
        if target.exists() or target.is_symlink():
            raise RenameError(f"{target.relative_to(root)} already exists: move it away first")
    return result


def _write_beside(path: Path, text: str) -> Path:
    """The new text in a temporary file in the same folder (so the swap is a rename), with the file's mode."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".renaming", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.chmod(tmp, path.stat().st_mode & 0o7777)
    return Path(tmp)


def apply(p: Plan) -> None:
    """Write every new file beside its original, then swap them all in; on failure, put everything back."""
    staged: dict[Path, Path] = {}
    swapped: list[Path] = []
    moved: list[tuple[Path, Path]] = []
    try:
        for path, (_, text) in p.contents.items():
            staged[path] = _write_beside(path, text)
        for path, tmp in staged.items():
            os.replace(tmp, path)
            swapped.append(path)
        for source, target in p.moves:
            if target.exists() or target.is_symlink():
                raise RenameError(f"{target.relative_to(p.root)} appeared while renaming")
            os.rename(source, target)
            moved.append((source, target))
    except (OSError, RenameError) as e:
        problems = []
        for source, target in reversed(moved):
            try:
                os.rename(target, source)
            except OSError as undo:
                problems.append(f"{target} -> {source}: {undo.strerror}")
        for path in swapped:
            try:
                os.replace(_write_beside(path, p.contents[path][0]), path)
            except OSError as undo:
                problems.append(f"{path}: {undo.strerror}")
        for tmp in staged.values():
            if tmp.exists():
                tmp.unlink()
        reason = e if isinstance(e, RenameError) else f"{e.strerror}: {e.filename}"
        if problems:
            raise RenameError(f"failed ({reason}) and could not undo: {'; '.join(problems)}") from None
        raise RenameError(f"failed ({reason}); every change was undone") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", default="", help="the new name: a lower-case Python identifier")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the project")
    args = parser.parse_args(argv)
    try:
        p = plan(args.root, args.name)
        apply(p)
    except RenameError as e:
        print(f"rename: error: {e}", file=sys.stderr)
        return 2
    print(
        f"renamed {p.old} -> {p.new}: {len(p.contents)} files changed, "
        f"src/{p.old} -> src/{p.new}; commands are now {p.new}-train, {p.new}-eval, ..."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
