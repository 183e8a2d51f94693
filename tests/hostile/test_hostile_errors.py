"""Mistakes that Hydra meets, on the command line, while composing or while building objects: one table, each
refused with exit status 2 and one `brisk: error:` line naming the key and the fix, no traceback, no run
directory left behind. The cases run brisk-train's real entry point in this process. A bug still raises (its
traceback is the report) and leaves no empty run directory; Ctrl-C while fit sets the data up ends as
"interrupted" with 130 (a real SIGINT to a real process).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from pathlib import Path

import pytest

from brisk.conf import CONFIG_PATH
from brisk.data import SyntheticDataModule
from brisk.errors import BuildError
from brisk.registry import CALLBACKS, DATASETS
from helpers import BASE, assert_user_error, brisk_train, env_with_tests, run_cli, tree

LONG_NAME = "x" * 300


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _options(group: str) -> str:
    """A group's options as a line lists them, read from conf/: an option added there breaks no case."""
    return ", ".join(sorted(p.stem for p in (Path(CONFIG_PATH) / group).glob("*.yaml")))


# case -> (overrides after BASE, with {root} for the project folder; needles of the error line)
CASES = {
    # what a constructor raises, wrapped by Hydra
    "brisk_error_in_a_constructor": (["model.tta=bogus"], ["model.tta=bogus", "flip_translate"]),
    "unexpected_trainer_argument": (["+trainer.foo=1"], ["trainer.foo", "Trainer", "Remove it"]),
    "argument_with_a_typo": (["+trainer.max_epoch=2"], ["trainer.max_epoch:", "did you mean trainer.max_epochs"]),
    "unexpected_net_argument": (["+model.net.foo=1"], ["model.net.foo", "SimpleCNN", "arguments: num_classes, width"]),
    # torch's Adam refuses it in its constructor: said with the key and the override
    "value_refused_by_a_constructor": (
        ["optimizer=adam", "optimizer.eps=-1"],
        ["optimizer:", "epsilon", "optimizer.eps=-1"],
    ),
    "net_removed": (["~model.net"], ["~model.net:", "cannot be removed", "model.net=<value>"]),
    "missing_package": (["trainer.accelerator=tpu"], ["trainer:", "torch_xla", "trainer.accelerator=tpu"]),
    "type_misspelled": (["model.net.type=simple_cn"], ["model.net.type=simple_cn", "simple_cnn", "NETS.register"]),
    "missing_extra": (["logger=wandb"], ["logger.wandb", "pip install -e '.[wandb]'", "logger=wandb"]),
    # Hydra's override and composition errors
    "group_set_to_null": (["optimizer=null"], ["optimizer=null", _options("optimizer")]),
    "unknown_key": (["trainer.foo=1"], ["trainer.foo=1", "no key trainer.foo", "max_epochs"]),
    "unknown_group": (["nogroup=x"], ["nogroup=x", "no key nogroup", "model", "optimizer"]),
    # with a config folder of the user's own, Hydra itself looks for the option
    "missing_option_file": (["model=nope", "--config-dir={root}"], ["model=nope", _options("model")]),
    "comma_in_a_path": (["data.root={root}/a,b"], ["data.root={root}/a,b", "data.root='{root}/a,b'"]),
    "unparsable_override": (["data.root=["], ["data.root=[", "Quote"]),
    "unset_environment_variable": (["data.root=${{oc.env:BRISK_NOT_SET}}"], ["data.root:", "BRISK_NOT_SET"]),
    # the run directory
    "run_dir_name_too_long": ([f"hydra.run.dir={{root}}/logs/{LONG_NAME}"], ["hydra.run.dir", "300 bytes", "255"]),
    "run_dir_empty": (["hydra.run.dir="], ["hydra.run.dir is empty", "current folder"]),
}
NEEDS = {"missing_package": "torch_xla", "missing_extra": "wandb"}


@pytest.mark.parametrize("case", CASES)
def test_hostile_config(case, project, capsys, monkeypatch, restore_logging):  # noqa: F811
    if case in NEEDS and _installed(NEEDS[case]):
        pytest.skip(f"{NEEDS[case]} is installed here")
    monkeypatch.delenv("BRISK_NOT_SET", raising=False)
    overrides, needles = CASES[case]
    before = tree(project)
    proc = brisk_train([*BASE, *(o.format(root=project) for o in overrides)], project, capsys, monkeypatch)
    assert_user_error(proc, *(n.format(root=project) for n in needles))
    assert tree(project) == before, "a refused run wrote, removed or changed files"


@CALLBACKS.register("buggy")
class Buggy:
    """A callback whose constructor has a bug: the builder ties its ZeroDivisionError to its key (BuildError)."""

    def __init__(self, steps: int = 0) -> None:
        self.per_step = 1 / steps


def test_a_bug_keeps_its_traceback_and_leaves_no_run_directory(project, capsys, monkeypatch, restore_logging):  # noqa: F811
    before = tree(project)
    with pytest.raises(BuildError) as raised:
        args = [*BASE, "imports=[test_hostile_errors]", "+callbacks.bug.type=buggy"]
        brisk_train(args, project, capsys, monkeypatch)
    assert isinstance(raised.value.__cause__, ZeroDivisionError)
    assert "brisk: error:" not in capsys.readouterr().err
    assert tree(project) == before, "the run directory of a run that never started was left behind"


@DATASETS.register("sigint_in_setup")
class SigintInSetup(SyntheticDataModule):
    """Ctrl-C (SIGINT to this process) while Trainer.fit sets the data up, and a setup slow enough to be in it."""

    def setup(self, stage: str | None = None) -> None:
        if self.trainer is not None and stage == "fit":  # inside fit, not the pre-flight checks' own read
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(60)
        super().setup(stage)


def test_ctrl_c_while_fit_sets_up_the_data_is_interrupted_130(project):
    run_dir = project / "run"
    args = [*BASE, "imports=[test_hostile_errors]", "data.type=sigint_in_setup", f"hydra.run.dir={run_dir}"]
    env = env_with_tests()
    env["PYTHONPATH"] += os.pathsep + str(Path(__file__).parent)  # this module, for its SigintInSetup
    # Ctrl-C as a terminal delivers it: a shell without job control starts background commands with SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler (this test failed so under `bash .ci/run &`).
    interruptible = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = run_cli("train", args, project, check=False, env=env, timeout=120, preexec_fn=interruptible)
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "Detected KeyboardInterrupt" in proc.stdout + proc.stderr, "the signal did not arrive inside Trainer.fit"
    assert proc.stderr.strip().splitlines()[-1].startswith("brisk: interrupted")
    assert not list(Path(run_dir).rglob("*.ckpt")), "nothing to checkpoint before the first step"
