"""brisk's layout, read from its imports: each layer imports only from itself and the layers below, no two parts
import each other (directly or round a loop), and the top level stays a short list.

Every import statement counts, the ones inside functions too: a lazy import is still a dependency."""

from __future__ import annotations

import ast
import functools
import itertools
from pathlib import Path

import pytest

import brisk

SRC = Path(brisk.__file__).parent
ENTRY_POINTS = {"train", "evaluate", "predict", "export", "compare"}
# Top to bottom. A part is a top-level module or package of brisk; `brisk` itself is its __init__.
LAYERS = [
    {*ENTRY_POINTS, "cli", "conf"},  # conf: the configs, and the schemas (brisk.run.schemas) stored before composing
    {"run"},
    {"callbacks", "checkpoints", "data", "deploy", "models", "optim", "search"},
    {"brisk", "compat", "errors", "fastloop", "registry", "utils"},
]
MAX_OTHER_TOP_MODULES = 5  # besides the entry points and __init__: cli, compat, errors, fastloop, registry (DESIGN.md)
MAX_LINES = 300


@functools.cache
def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the brisk package (its config folder holds only YAML)."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ["brisk", *path.relative_to(SRC).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path) -> set[str]:
    """The brisk modules that module `name` imports, each resolved to the longest name that is a module."""
    known = modules()
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*here[: len(here) - node.level + 1], *([node.module] if node.module else [])])
            base = base if node.level else node.module or ""
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for target in names:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.split(".")[0] == "brisk" and target != name:
                found.add(target)
    return found


def part(name: str) -> str:
    """`brisk.run.builder` -> `run`; `brisk` -> `brisk`."""
    return name.split(".")[1] if "." in name else "brisk"


def layer(name: str) -> int:
    for level, parts in enumerate(LAYERS):
        if part(name) in parts:
            return level
    raise AssertionError(f"{name}: its part `{part(name)}` is in no layer; add it to LAYERS in {__file__}")


@functools.cache
def graph() -> dict[str, set[str]]:
    return {name: imported(name, path) for name, path in modules().items()}


def test_each_layer_imports_only_itself_and_below():
    upward = [
        f"{name} (layer {layer(name)}) imports {target} (layer {layer(target)})"
        for name, targets in graph().items()
        for target in sorted(targets)
        if layer(target) < layer(name)
    ]
    assert not upward, "\n".join(upward)


def test_no_two_parts_import_each_other():
    edges = {(part(a), part(b)) for a, targets in graph().items() for b in targets if part(a) != part(b)}
    parts = {p for edge in edges for p in edge}
    reach = {p: {b for a, b in edges if a == p} for p in parts}
    changed = True
    while changed:  # the transitive closure: a few dozen parts
        changed = False
        for p in parts:
            more = set().union(*(reach[q] for q in reach[p])) - reach[p]
            if more:
                reach[p] |= more
                changed = True
    loops = sorted(
        {tuple(sorted((a, b))) for a, b in itertools.permutations(parts, 2) if b in reach[a] and a in reach[b]}
    )
    assert not loops, f"parts that import each other, directly or round a loop: {loops}"


def test_top_level_is_the_entry_points_and_a_few_modules():
    top = {p.stem for p in SRC.glob("*.py")} - {"__init__"}
    assert top >= ENTRY_POINTS
    others = sorted(top - ENTRY_POINTS)
    assert len(others) <= MAX_OTHER_TOP_MODULES, f"{others}: put what is not an entry point in a package"


@pytest.mark.parametrize("package", ["brisk", "brisk_lab", "hydra_plugins"])
def test_no_module_is_long(package):
    root = SRC.parent / package
    long = {
        str(p.relative_to(SRC.parent)): n
        for p in root.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_scan_sees_imports():
    # the rules above pass vacuously if nothing is found: a module's imports, and one inside a function
    found = graph()
    assert {"brisk.run.checks", "brisk.run.preflight", "brisk.run.builder"} <= found["brisk.run.prepare"]
    assert "brisk.run.tune" in found["brisk.train"]  # imported inside main()
    assert layer("brisk.train") == 0 and layer("brisk.utils.explain") == len(LAYERS) - 1
