"""A run's files are data: no `_target_`, Hydra key or interpolation they hold, at any depth, calls anything but
an exact entry of brisk's registry for its place (brisk.checkpoints.registry).

The walk tries every callable of the packages an allowlist by package used to admit; the crafted runs hold
a function of lightning.pytorch.callbacks that deletes whatever folder it is given.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from brisk.checkpoints import restore
from brisk.cli import CONFIG_PATH
from brisk.errors import BriskError
from brisk.run.builder import build_model
from helpers import TINY, assert_user_error, compose_cfg, main_in_process

# Lightning's ModelCheckpoint._link_checkpoint: removes `linkpath`, a whole folder included, before it links a
# checkpoint there. Reachable by this dotted path and defined in lightning.pytorch.callbacks.
REMOVES = "lightning.pytorch.callbacks.ModelCheckpoint._link_checkpoint"
OLD_ALLOWLIST = (
    "brisk.models",
    "brisk.callbacks",
    "torch.optim",
    "lightning.pytorch.callbacks",
    "lightning.pytorch.loggers",
)
WALKED = (*OLD_ALLOWLIST, "brisk.data", "brisk.optim")  # brisk.data.synthetic.write writes where it is told;
# brisk.optim holds what brisk.models once did
NET, DATA, CLASSIFIER = "brisk.models.nets.SimpleCNN", "brisk.data.SyntheticDataModule", "brisk.models.ImageClassifier"
EVAL = ["trainer=cpu", *[o for o in TINY if o.startswith("data")]]


# -- the walk -----------------------------------------------------------------------------------------------------


def walked_names() -> set[str]:
    """Every callable a dotted path reaches in the walked packages: module attributes, public and private, and
    the attributes of the classes defined there (methods, static and class methods)."""
    modules = []
    for name in WALKED:
        package = importlib.import_module(name)
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            modules.append(importlib.import_module(info.name))
    names = set()
    for module in modules:
        for attr, obj in inspect.getmembers(module):
            if not callable(obj):
                continue
            names.add(f"{module.__name__}.{attr}")
            if isinstance(obj, type) and (obj.__module__ or "").startswith(WALKED):
                names |= {f"{module.__name__}.{attr}.{k}" for k, v in vars(obj).items() if callable(getattr(obj, k, v))}
    return names


def conf_names() -> dict[str, set[str]]:
    """What the shipped conf/ option files build at each place, read here on their own: the expectation."""
    conf = Path(CONFIG_PATH)
    groups = {
        "model.net": ("model", "net"),
        "optimizer": ("optimizer",),
        "scheduler": ("scheduler",),
        "data": ("data",),
    }
    found = {place: set() for place in (*groups, "model")}
    for place, (group, *inside) in groups.items():
        for path in (conf / group).glob("*.yaml"):
            node = yaml.safe_load(path.read_text()) or {}
            for key in inside:
                node = node.get(key) or {}
            if "_target_" in node:
                found[place].add(node["_target_"])
    found["model"].add(yaml.safe_load((conf / "classifier.yaml").read_text())["_target_"])  # train, eval, predict
    return found


# Where the walk puts each name: (file content, the place at which a registry entry is admitted, or None).
WALK = {
    "model.net": (lambda t: {"model": {"_target_": CLASSIFIER, "net": {"_target_": t}}}, "model.net"),
    "model": (lambda t: {"model": {"_target_": t, "net": {"_target_": NET}}}, "model"),
    "optimizer": (lambda t: {"optimizer": {"_target_": t, "_partial_": True}}, "optimizer"),
    "scheduler": (lambda t: {"scheduler": {"_target_": t, "_partial_": True}}, "scheduler"),
    "data": (lambda t: {"data": {"_target_": t}}, "data"),
    "nested in model.net": (lambda t: {"model": {"net": {"_target_": NET, "block": {"_target_": t}}}}, None),
    "in a list in model.net": (lambda t: {"model": {"net": {"_target_": NET, "blocks": [1, {"_target_": t}]}}}, None),
    "nested in data": (lambda t: {"data": {"_target_": DATA, "synthetic": {"_target_": t}}}, None),
    "nested in optimizer": (
        lambda t: {"optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": {"_target_": t}}},
        None,
    ),
    "model.net with _partial_": (lambda t: {"model": {"net": {"_target_": t, "_partial_": True}}}, None),
    "model.net with _args_": (lambda t: {"model": {"net": {"_target_": t, "_args_": ["/"]}}}, None),
    "data with _recursive_": (lambda t: {"data": {"_target_": t, "_recursive_": True}}, None),
    "scheduler with _convert_": (lambda t: {"scheduler": {"_target_": t, "_partial_": True, "_convert_": "all"}}, None),
}


def test_no_callable_of_the_old_allowlist_is_reachable_but_the_registry():
    names = walked_names()
    assert REMOVES in names and "brisk.data.synthetic.write" in names  # the walk reaches the known gadgets
    admitted, other_errors = set(), []
    for case, (content, _) in WALK.items():
        for name in names:
            try:
                restore.check_targets(content(name), "a file")
            except BriskError:
                continue
            except Exception as e:  # a refusal is a BriskError: anything else is a bug in the check
                other_errors.append((case, name, repr(e)))
                continue
            admitted.add((case, name))
    expected = conf_names()
    want = {(case, n) for case, (_, place) in WALK.items() if place for n in names if n in expected[place]}
    assert other_errors == []
    assert sorted(admitted - want) == []
    assert sorted(want - admitted) == []
    assert ("model.net", NET) in admitted and ("optimizer", "torch.optim.SGD") in admitted
    for _, name in admitted:  # a class, or one of brisk's own factories that conf/ builds with
        module, _, attr = name.rpartition(".")
        obj = getattr(importlib.import_module(module), attr)
        assert isinstance(obj, type) or obj.__module__.startswith(("brisk.models.", "brisk.optim.")), name


def test_a_name_from_a_file_is_never_imported(tmp_path, monkeypatch):
    """A module under brisk.models that no one imports: a file naming it must not import it to check it."""
    import brisk.models

    marker = tmp_path / "imported"
    (tmp_path / "hostile_probe.py").write_text(f"open({str(marker)!r}, 'w').close()\n\ndef boom(): pass\n")
    monkeypatch.setattr(brisk.models, "__path__", [*brisk.models.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "brisk.models.hostile_probe", raising=False)
    for content in WALK["model.net"][0], WALK["nested in model.net"][0]:
        with pytest.raises(BriskError, match=r"refused model\.net(\.block)?\._target_=brisk\.models\.hostile_probe"):
            restore.check_targets(content("brisk.models.hostile_probe.boom"), "a file")
    assert "brisk.models.hostile_probe" not in sys.modules
    assert not marker.exists()


# -- crafted runs, in process ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def genuine(brisk_root) -> tuple[dict, dict]:
    """A TINY run's saved config (resolved, as brisk writes it) and checkpoint (real weights), never trained."""
    cfg = compose_cfg(TINY, brisk_root)
    model = build_model(cfg)
    checkpoint = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "pytorch-lightning_version": L.__version__,
    }
    return OmegaConf.to_container(cfg, resolve=True), checkpoint


@pytest.fixture(scope="module")
def eval_cfg(brisk_root):
    return compose_cfg([*EVAL, "ckpt_path=unused"], brisk_root, config_name="eval")


@pytest.fixture
def victim(tmp_path) -> Path:
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "thesis.tex").write_text("keep me")
    return folder


def remover(victim: Path) -> dict:
    """What deletes `victim` when Hydra instantiates it."""
    return {"_target_": REMOVES, "trainer": {"is_global_zero": True}, "filepath": "x.ckpt", "linkpath": str(victim)}


def write_run(folder: Path, genuine, edit_config=None, edit_hparams=None, with_config: bool = True) -> Path:
    """A run directory: .hydra/config.yaml (unless `with_config` is false) and checkpoints/last.ckpt."""
    config, checkpoint = copy.deepcopy(genuine)
    if edit_config:
        edit_config(config)
    if edit_hparams:
        edit_hparams(checkpoint["hyper_parameters"])
    if with_config:
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    ckpt = folder / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save(checkpoint, ckpt)
    return ckpt


def _set(path: str, value):
    """An edit: put `value` at a dotted path of a plain config (a list index as a last part)."""

    def edit(node: dict) -> None:
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value(node) if callable(value) else value

    return edit


# (what is done to the saved config, given the victim folder; what the one error line names)
CRAFTED = {
    "function as model.net": (lambda v: _set("model.net", remover(v)), "model.net._target_=" + REMOVES),
    "function nested in model.net": (lambda v: _set("model.net.block", remover(v)), "model.net.block._target_="),
    "function in a list in model.net": (lambda v: _set("model.net.blocks", [0, remover(v)]), "model.net.blocks[1]."),
    "function nested in the optimizer": (lambda v: _set("optimizer.lr", remover(v)), "optimizer.lr._target_="),
    "function as the scheduler": (
        lambda v: _set("scheduler", {**remover(v), "_partial_": True}),
        "scheduler._target_=" + REMOVES,
    ),
    "function nested in data": (lambda v: _set("data.synthetic.seed", remover(v)), "data.synthetic.seed._target_="),
    "_partial_ on a registered net": (lambda v: _set("model.net._partial_", True), "model.net._partial_=True"),
    "_args_ on a registered net": (lambda v: _set("model.net._args_", [str(v)]), "model.net._args_="),
    "_recursive_ on the model": (lambda v: _set("model._recursive_", True), "model._recursive_=True"),
    "_convert_ on data": (lambda v: _set("data._convert_", "all"), "data._convert_=all"),
    "_partial_ false on the optimizer": (lambda v: _set("optimizer._partial_", False), "optimizer._partial_=False"),
    "an interpolation": (lambda v: _set("data.root", "${oc.env:HOME}"), "data.root=${oc.env:HOME}"),
}


@pytest.mark.parametrize("case", CRAFTED, ids=list(CRAFTED))
def test_a_crafted_run_config_calls_nothing(case, genuine, eval_cfg, victim, tmp_path):
    craft, says = CRAFTED[case]
    honest = write_run(tmp_path / "honest", genuine)
    assert restore.with_run_config(eval_cfg, honest).model.net._target_ == NET  # the run as written is admitted
    ckpt = write_run(tmp_path / "run", genuine, edit_config=craft(victim))
    with pytest.raises(BriskError) as refused:
        restore.load_model(restore.with_run_config(eval_cfg, ckpt), ckpt)
    message = str(refused.value)
    assert f"{tmp_path / 'run' / '.hydra' / 'config.yaml'}: refused {says}" in message and "\n" not in message
    assert (victim / "thesis.tex").read_text() == "keep me"


# (what is done to the checkpoint's hyper_parameters, given the victim folder; what the one error line names)
HPARAMS = {
    "function nested in net": (lambda v: _set("net.block", remover(v)), "model.net.block._target_="),
    "function hidden in a tuple": (lambda v: _set("net.blocks", (remover(v),)), "model.net.blocks[0]._target_="),
    "function as the optimizer": (
        lambda v: _set("optimizer", {**remover(v), "_partial_": True}),
        "optimizer._target_=" + REMOVES,
    ),
    "function as the model": (lambda v: _set("_target_", REMOVES), "model._target_=" + REMOVES),
    "_args_ on the model": (lambda v: _set("_args_", [str(v)]), "model._args_="),
}


@pytest.mark.parametrize("case", HPARAMS, ids=list(HPARAMS))
def test_crafted_checkpoint_hyperparameters_call_nothing(case, genuine, eval_cfg, victim, tmp_path):
    """A checkpoint without its run's config: the model comes from its hyperparameters, checked the same way."""
    craft, says = HPARAMS[case]
    honest = write_run(tmp_path / "honest", genuine, with_config=False)
    assert restore.load_model(restore.with_run_config(eval_cfg, honest), honest) is not None
    ckpt = write_run(tmp_path / "run", genuine, edit_hparams=craft(victim), with_config=False)
    with pytest.raises(BriskError) as refused:
        restore.load_model(restore.with_run_config(eval_cfg, ckpt), ckpt)
    message = str(refused.value)
    assert f"{ckpt} (hyper_parameters): refused {says}" in message and "\n" not in message
    assert (victim / "thesis.tex").read_text() == "keep me"


def test_the_commands_own_config_registers_classes_only(genuine, brisk_root, tmp_path):
    """A class the command's config names at a place (as the user's config folder or local/ file would) may be
    named there by the run's files too; a function may not, and the message says how to trust it."""
    for name, admitted in ("torchvision.models.AlexNet", True), ("torchvision.models.alexnet", False):
        cfg = compose_cfg([*EVAL, "ckpt_path=unused", f"+model.net._target_={name}"], brisk_root, "eval")
        ckpt = write_run(tmp_path / name, genuine, edit_config=_set("model.net", {"_target_": name}))
        if admitted:
            assert restore.with_run_config(cfg, ckpt).model.net._target_ == name
        else:
            says = rf"not a class.*Give \+\+model\.net\._target_={name} on the command line"
            with pytest.raises(BriskError, match=says):
                restore.with_run_config(cfg, ckpt)
        with pytest.raises(BriskError, match=r"refused model\.net\._target_="):  # the same run, without that config
            restore.with_run_config(compose_cfg([*EVAL, "ckpt_path=unused"], brisk_root, "eval"), ckpt)


@pytest.mark.parametrize("command, keys", [("predict", ["inputs=unused"]), ("export", [])])
def test_predict_and_export_load_the_same_way(command, keys, genuine, brisk_root, victim, tmp_path):
    ckpt = write_run(tmp_path / "run", genuine, edit_config=_set("model.net.block", remover(victim)))
    cfg = compose_cfg([f"ckpt_path={ckpt}", *keys], brisk_root, command)
    with pytest.raises(BriskError, match=r"config\.yaml: refused model\.net\.block\._target_="):
        restore.load_run(cfg)
    assert (victim / "thesis.tex").read_text() == "keep me"


# -- end to end -------------------------------------------------------------------------------------------------


def test_brisk_eval_of_a_crafted_run_deletes_nothing(genuine, brisk_root, victim, tmp_path, capsys):
    ckpt = write_run(tmp_path / "run", genuine, edit_config=_set("model.net.block", remover(victim)))
    out = tmp_path / "eval-out"
    capsys.readouterr()
    code = main_in_process("evaluate", ["trainer=cpu", f"ckpt_path={ckpt}", f"hydra.run.dir={out}"], brisk_root)
    captured = capsys.readouterr()
    proc = subprocess.CompletedProcess([], code, captured.out, captured.err)
    assert_user_error(
        proc, f"{tmp_path / 'run' / '.hydra' / 'config.yaml'}: refused model.net.block._target_={REMOVES}"
    )
    assert (victim / "thesis.tex").read_text() == "keep me"
    assert not out.exists()  # a refused command leaves no run directory


def test_a_bare_tensor_saved_as_a_checkpoint_is_one_line(eval_cfg, tmp_path):
    """torch's safe loader allows a file that holds a tensor alone: not a mapping, so it names no model."""
    ckpt = tmp_path / "weights.ckpt"
    torch.save(torch.zeros(3), ckpt)
    with pytest.raises(BriskError, match="has no model hyperparameters"):
        restore.with_run_config(eval_cfg, ckpt)


def test_an_older_runs_optimizer_weight_decay_is_left_out(genuine, eval_cfg, tmp_path, caplog):
    """brisk-train refuses optimizer.weight_decay now, but older runs may hold it: it never applied, so eval,
    predict and export still rebuild their model, without it."""
    ckpt = write_run(tmp_path / "run", genuine, edit_config=_set("optimizer.weight_decay", 5e-4))
    model = restore.load_model(restore.with_run_config(eval_cfg, ckpt), ckpt)
    assert "weight_decay" not in model.hparams.optimizer
    assert "optimizer.weight_decay=0.0005 left out" in caplog.text


@pytest.mark.parametrize("with_config", [True, False], ids=["run config", "checkpoint hyperparameters"])
def test_an_older_runs_moved_names_are_read_as_they_are_now(with_config, genuine, eval_cfg, tmp_path):
    """Runs written before the optimizer and the schedules moved to brisk.optim name them by their old module: they
    rebuild their model as before, under the new names, and nothing is imported by the old one."""
    old = {"optimizer": "brisk.models.muon.MuonWithAdamW", "scheduler": "brisk.models.schedules.exp_decay"}

    def edit(section: dict) -> None:
        section["optimizer"]["_target_"] = old["optimizer"]
        section["scheduler"] = {"_target_": old["scheduler"], "_partial_": True, "k": 0.1}

    ckpt = write_run(tmp_path / "run", genuine, edit, edit if not with_config else None, with_config=with_config)
    cfg = restore.with_run_config(eval_cfg, ckpt)
    assert (cfg.optimizer._target_, cfg.scheduler._target_) == ("brisk.optim.MuonWithAdamW", "brisk.optim.exp_decay")
    assert "brisk.models.muon" not in sys.modules
    restore.load_model(cfg, ckpt)
