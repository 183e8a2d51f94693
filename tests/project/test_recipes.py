"""A user who follows the docs keeps a green suite (issue 41, item 2): on a copy of the project, a net, a dataset, an
augmentation and a callback added by their recipes, word for word and where a clone keeps them, then the copy's
own config tests, which read their options from its conf/."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from project_copy import clean_env, copy_project

# (the page, the recipe's heading, where its Python file and its YAML go in a clone)
CALLBACK_YAML = "conf/callbacks/each/epoch_line.yaml"
RECIPES = [
    ("docs/extending.md", "**Add a net**", "src/brisk/models/nets/tiny_net.py", "conf/model/tiny_net.yaml"),
    ("docs/extending.md", "**Add an augmentation**", "src/brisk/data/blur.py", "conf/augment/blur.yaml"),
    (
        "docs/extending.md",
        "**Add a callback**",
        "src/brisk/callbacks/epoch_line.py",
        "conf/callbacks/each/epoch_line.yaml",
    ),
    ("docs/data.md", "## Adding a dataset", "src/brisk/data/npz_data.py", "conf/data/npz.yaml"),
]
# The copy's tests that each recipe's files reach (pytest -rA lists each outcome with its id).
EXPECTED = [
    "PASSED tests/run/test_config.py::test_option_composes_and_instantiates[model=tiny_net]",
    "PASSED tests/run/test_config.py::test_option_composes_and_instantiates[augment=blur]",
    "PASSED tests/run/test_config.py::test_each_callback_turns_on_alone_as_the_readme_says[epoch_line]",
    "PASSED tests/run/test_config.py::test_callback_options_are_built_from_one_file_per_callback",
]


def test_the_docs_recipes_keep_the_config_tests_green(tmp_path):
    root = copy_project(tmp_path / "clone")
    for page, heading, module, yaml in RECIPES:
        section = (root / page).read_text().split(heading, 1)[1]
        assert os.path.basename(module) in section and os.path.basename(yaml) in section  # the names it gives
        for path, language in [(module, "python"), (yaml, "yaml")]:
            (root / path).write_text(re.search(rf"```{language}\n(.*?)```", section, re.S).group(1))
    # The copy's sources and tests, not this checkout's: its brisk finds the recipes' modules and its conf/.
    env = clean_env(PYTHONPATH=os.pathsep.join([str(root / "src"), str(root / "tests")]))
    command = [sys.executable, "-m", "pytest", "tests/run/test_config.py", "-rA", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [*command, "-k", "tiny_net or blur or npz or callback"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for line in EXPECTED:
        assert line in proc.stdout, proc.stdout[-4000:]
    # root: ??? is the user's to give: the dataset composes, and without a folder of its files nothing is built
    assert "data=npz composes; data.root (???) is the user's to give" in proc.stdout
