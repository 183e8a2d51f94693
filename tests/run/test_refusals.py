"""A user's mistake on brisk-train's command line ends in one `brisk: error:` line that starts with the key at fault,
exit status 2, and no run directory. The cases assert the key, not the wording, so a clearer message breaks nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from brisk.utils.explain import explain
from helpers import TINY, assert_user_error, compose_cfg, main_in_process

# (overrides, the key the line must start with)
CASES = {
    "type_from_the_trainer_schema": (["trainer.max_epochs=ten"], "trainer.max_epochs"),
    "bool_from_the_trainer_schema": (["trainer.benchmark=maybe"], "trainer.benchmark"),
    "range_of_a_trainer_argument": (["trainer.max_epochs=0"], "trainer.max_epochs"),
    "misspelt_key": (["data.batchsize=3"], "data.batchsize"),
    "batch_zero": (["data.batch_size=0"], "data.batch_size"),
    "batch_split_over_ranks": (["trainer.num_nodes=3", "data.batch_size=100"], "data.batch_size"),
    "lr_zero": (["optimizer.lr=0"], "optimizer.lr"),
    "unknown_net": (["model.net.type=nonet"], "model.net.type"),
    "net_argument_misspelt": (["+model.net.widht=3"], "model.net.widht"),
    "unknown_group_option": (["optimizer=nope"], "optimizer"),
    "missing_checkpoint": (["ckpt_path=/nonexistent/last.ckpt"], "ckpt_path"),
    "zero_devices": (["trainer.devices=0"], "trainer.devices"),
    "augment_range": (["data.augment.rotate=500"], "data.augment.rotate"),
    "seed_negative": (["seed=-1"], "seed"),
    "classifier_range": (["model.label_smoothing=1.0"], "model.label_smoothing"),
    "synthetic_set_size": (["data.synthetic.n_train=7"], "data.synthetic.n_train"),
    "val_size_negative": (["data.val_size=-1"], "data.val_size"),
    "target_above_one": (["target_acc=94"], "target_acc"),
    "net_width_zero": (["model.net.width=0"], "model.net.width"),
    "step_checkpoints_negative": (
        ["callbacks.last_checkpoint.every_n_train_steps=-1"],
        "callbacks.last_checkpoint.every_n_train_steps",
    ),
    "classifier_nan": (["model.weight_decay=nan"], "model.weight_decay"),
    "optimizer_decay_belongs_to_the_model": (["+optimizer.weight_decay=0.1"], "optimizer.weight_decay"),
    "warmup_share_of_the_whole_run": (["scheduler=onecycle", "scheduler.pct_start=1.0"], "scheduler.pct_start"),
    # torch's OneCycleLR ignores it beside the total_steps brisk passes; without the +, the schema has no such key
    "planned_schedule_length": (["scheduler=onecycle", "+scheduler.epochs=30"], "scheduler.epochs"),
    # torch's KeyError, a message of several lines: said as one, its line breaks not shown as "\\n"
    "schedule_resumed_in_a_fresh_run": (["scheduler=onecycle", "+scheduler.last_epoch=3"], "scheduler"),
    "range_without_a_search": (["-m", "optimizer.lr=interval(0.01,0.1)"], "optimizer.lr"),
    "tests_nothing": (["trainer.limit_test_batches=0"], "trainer.limit_test_batches"),
    "no_value": (["data.batch_size=???"], "data.batch_size"),  # before: a TypeError in the data's setup
    "no_value_for_a_finder": (["tune=batch_size", "data.batch_size=???"], "data.batch_size"),
    "a_key_every_run_reads_removed": (["~seed"], "seed"),
}


def assert_key(status: int, err: str, key: str) -> None:
    line = assert_user_error(subprocess.CompletedProcess([], status, "", err))
    assert re.match(rf"brisk: error: [+~]?{re.escape(key)}[=:]", line) and "\\n" not in line, line


@pytest.mark.parametrize("case", CASES)
def test_a_mistake_is_one_line_starting_with_its_key(case, tmp_path, capsys):
    overrides, key = CASES[case]
    run_dir = tmp_path / "run"
    status = main_in_process("train", [*TINY, *overrides, f"hydra.run.dir={run_dir}"], tmp_path)
    assert_key(status, capsys.readouterr().err, key)
    assert not run_dir.exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    "override, plus",
    [("trainer.fooo=1", False), ("optimizer.fooo=1", False), ("fooo=1", False), ("model.net.fooo=3", True)],
)
def test_a_misspelt_key_is_told_to_add_itself_only_where_a_plus_can(override, plus, tmp_path):
    """`+key` adds a key, but a schema already has every argument its constructor takes (+trainer.fooo is refused
    next) and no code reads a new top-level key (+fooo is ignored): there the line lists the keys that are. A net's
    arguments have no schema, and a net of one's own may take more than its file lists."""
    with pytest.raises(Exception) as error:
        compose_cfg([override], tmp_path)
    line = str(explain(error.value, [override]))
    assert line.startswith(override) and (f"+{override}" in line) is plus, line
    assert plus or "(the keys" in line, line


def test_a_search_without_optuna_names_the_extra(tmp_path):
    """Optuna missing, as after `make train` alone: Python's own refusal of an import blocked in sys.modules."""
    code = "import sys; sys.modules['optuna'] = None; from brisk.train import main; main()"
    args = ["-m", "hparams_search=optuna", f"hydra.sweeper.storage=sqlite:///{tmp_path}/optuna.db", *TINY]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    line = assert_user_error(proc, "pip install -e '.[search]'")
    assert line.startswith("brisk: error: hparams_search=optuna:"), line
    assert not (tmp_path / "logs").exists() and not (tmp_path / "optuna.db").exists()


@pytest.mark.parametrize("knob, value", [("label_smoothing", 1.0), ("l1", -1.0), ("norm_lr_mult", 0.0)])
def test_a_range_lives_in_the_constructor_that_uses_it(knob, value):
    """From Python, without a config: the classifier refuses the value itself, with the key a config would use."""
    from brisk.errors import BriskError
    from brisk.models import ImageClassifier

    with pytest.raises(BriskError) as error:
        ImageClassifier(
            net={"type": "simple_cnn"}, optimizer={"type": "sgd", "lr": 0.1}, class_names=["a", "b"], **{knob: value}
        )
    assert error.value.key == f"model.{knob}"


@pytest.mark.parametrize("switch", ["whiten_init", "dirac", "frozen_bn_scale"])
def test_a_nets_switch_is_a_bool(switch):
    from brisk.errors import BriskError
    from brisk.registry import NETS

    with pytest.raises(BriskError) as error:
        NETS.get("airbench")(**{switch: "maybe"})
    assert error.value.key == f"model.net.{switch}"


def test_a_key_of_a_launcher_not_picked_names_the_launcher_that_has_it(tmp_path, capsys):
    # The basic launcher has no settings; joblib's (a dev dependency) registers its schema in Hydra's ConfigStore.
    status = main_in_process("train", [*TINY, "hydra.launcher.n_jobs=2"], tmp_path)
    line = assert_user_error(subprocess.CompletedProcess([], status, "", capsys.readouterr().err))
    assert line.startswith("brisk: error: hydra.launcher.n_jobs=2:") and "add hydra/launcher=joblib" in line, line
