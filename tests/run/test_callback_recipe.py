"""extending.md's "Add a callback" word for word, and the always-on callbacks: listed in conf/train.yaml, and refused in
one line, naming the promise, when one is left out (issue 41, item 3)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from brisk import always_on
from brisk.errors import BriskError
from brisk.run import checks
from brisk.run.builder import PROMISES
from helpers import TINY, compose_cfg, main_in_process

README = (Path(__file__).parents[2] / "docs" / "extending.md").read_text().split("**Add a callback**", 1)[1]


def test_adding_a_callback_as_the_readme_says(project, monkeypatch, capsys):
    """Its class as a file of brisk.callbacks (as in a clone), its YAML as conf/callbacks/each/epoch_line.yaml on
    Hydra's search path, turned on by the override the README gives: a short fit prints its line each epoch."""
    import brisk.callbacks

    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    block = re.search(r"```yaml\n(.*?)```", README, re.S).group(1)
    turn_on = re.search(r"`brisk-train (\+callbacks/each@callbacks\.epoch_line=epoch_line)`", README).group(1)
    assert '@CALLBACKS.register("epoch_line")' in code and "type: epoch_line" in block
    assert "`- each/epoch_line@epoch_line` in `conf/callbacks/default.yaml`" in README  # default.yaml's own form
    (project / "mine").mkdir()
    (project / "mine" / "epoch_line.py").write_text(code)
    monkeypatch.setattr(brisk.callbacks, "__path__", [*brisk.callbacks.__path__, str(project / "mine")])
    monkeypatch.delitem(sys.modules, "brisk.callbacks.epoch_line", raising=False)
    conf = project / "conf"
    (conf / "callbacks" / "each").mkdir(parents=True)
    (conf / "callbacks" / "each" / "epoch_line.yaml").write_text(block)
    short = ["trainer.max_epochs=2", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1"]
    args = [*TINY, *short, f"hydra.searchpath=[file://{conf}]", turn_on, f"hydra.run.dir={project / 'run'}"]
    assert main_in_process("train", args, project) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1"] and "val/acc 0." in lines[0]


def test_the_always_on_callbacks_are_the_ones_conf_lists(brisk_root):
    """conf/train.yaml's always_on names what brisk-train adds, each by its module (files are named after their
    classes), so the list a user reads is the list that runs."""
    listed = list(compose_cfg([], brisk_root).always_on)
    assert sorted(listed) == sorted(PROMISES)
    assert sorted(type(c).__module__.rsplit(".", 1)[1] for c in always_on()) == sorted(PROMISES)


@pytest.mark.parametrize("name", list(PROMISES))
def test_leaving_out_an_always_on_callback_is_refused_naming_its_promise(name, brisk_root):
    rest = ",".join(n for n in PROMISES if n != name)
    with pytest.raises(BriskError) as refused:
        checks.validate(compose_cfg([*TINY, f"always_on=[{rest}]"], brisk_root))
    line = str(refused.value)
    assert line.startswith(f"always_on: {PROMISES[name]} depends on") and f"put {name} back" in line
    assert "\n" not in line


def test_a_refused_always_on_list_leaves_no_run_directory(project, capsys):
    run_dir = project / "run"
    args = [*TINY, "always_on=[speed_meter,startup_clock,resume_state,divergence_guard,sigterm_checkpoint]"]
    assert main_in_process("train", [*args, f"hydra.run.dir={run_dir}"], project) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "always_on: exact resume depends on resume_state and rank_seed; put rank_seed back in always_on."
    )
    assert not run_dir.exists()
    assert main_in_process("train", [*TINY, "always_on=[speed_meter,my_own]", "trainer.max_epochs=1"], project) == 2
    assert "my_own is not one of brisk's always-on callbacks" in capsys.readouterr().err
