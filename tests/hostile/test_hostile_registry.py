"""A run's files are data: they pick classes by registered name (brisk.registry), and no `_target_`, Hydra key,
`imports` or interpolation they hold, at any depth, makes brisk import or call anything (brisk.checkpoints.restore).

The walk tries every callable of the packages an allowlist by package once admitted: none is admitted anywhere,
but the code paths an earlier brisk wrote, at their own place, which read as names (brisk.checkpoints.legacy).
The crafted runs hold a function of lightning.pytorch.callbacks that deletes whatever folder it is given.
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

from brisk.checkpoints import legacy, restore
from brisk.checkpoints.legacy import renamed
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
NET = "brisk.models.nets.SimpleCNN"
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


# Where the walk puts each name: (file content, the place at which an earlier brisk's path reads as a name, or None).
WALK = {
    "model.net": (lambda t: {"model": {"net": {"_target_": t}}}, "model.net"),
    "model": (lambda t: {"model": {"_target_": t, "net": {"type": "simple_cnn"}}}, "model"),
    "optimizer": (lambda t: {"optimizer": {"_target_": t, "_partial_": True}}, "optimizer"),
    "scheduler": (lambda t: {"scheduler": {"_target_": t, "_partial_": True}}, "scheduler"),
    "data": (lambda t: {"data": {"_target_": t}}, "data"),
    "nested in model.net": (lambda t: {"model": {"net": {"type": "simple_cnn", "block": {"_target_": t}}}}, None),
    "in a list in model.net": (
        lambda t: {"model": {"net": {"type": "simple_cnn", "blocks": [1, {"_target_": t}]}}},
        None,
    ),
    "nested in data": (lambda t: {"data": {"type": "synthetic", "synthetic": {"_target_": t}}}, None),
    "nested in optimizer": (lambda t: {"optimizer": {"type": "sgd", "lr": {"_target_": t}}}, None),
    "model.net with _args_": (lambda t: {"model": {"net": {"_target_": t, "_args_": ["/"]}}}, None),
    "data with _recursive_": (lambda t: {"data": {"_target_": t, "_recursive_": True}}, None),
    "scheduler with _convert_": (lambda t: {"scheduler": {"_target_": t, "_partial_": True, "_convert_": "all"}}, None),
}


def test_no_callable_of_the_old_allowlist_is_admitted_but_old_code_paths_as_names():
    names = walked_names()
    assert REMOVES in names and "brisk.data.synthetic.write" in names  # the walk reaches the known gadgets
    admitted, other_errors = set(), []
    for case, (content, _) in WALK.items():
        for name in names:
            try:
                restore.check(renamed(content(name)), "a file")
            except BriskError:
                continue
            except Exception as e:  # a refusal is a BriskError: anything else is a bug in the check
                other_errors.append((case, name, repr(e)))
                continue
            admitted.add((case, name))
    earlier = {**legacy.TYPES, "model": {legacy.CLASSIFIER: None}}
    want = {(case, n) for case, (_, place) in WALK.items() if place for n in names if n in earlier[place]}
    assert other_errors == []
    assert sorted(admitted - want) == []
    assert sorted(want - admitted) == []
    assert ("model.net", NET) in admitted and ("optimizer", "torch.optim.SGD") in admitted


def test_a_name_from_a_file_is_never_imported(tmp_path, monkeypatch):
    """A module under brisk.models that no one imports: a file naming it must not import it to check it."""
    import brisk.models

    marker = tmp_path / "imported"
    (tmp_path / "hostile_probe.py").write_text(f"open({str(marker)!r}, 'w').close()\n\ndef boom(): pass\n")
    monkeypatch.setattr(brisk.models, "__path__", [*brisk.models.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "brisk.models.hostile_probe", raising=False)
    for content in WALK["model.net"][0], WALK["nested in model.net"][0]:
        with pytest.raises(BriskError, match=r"refused model\.net(\.block)?\._target_=brisk\.models\.hostile_probe"):
            restore.check(renamed(content("brisk.models.hostile_probe.boom")), "a file")
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
    saved = OmegaConf.to_container(cfg, resolve=True)
    del saved["imports"]  # as brisk writes a run's record (brisk.run.rundir)
    return saved, checkpoint


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
    "imports in the model": (lambda v: _set("model.imports", ["os"]), "model.imports=['os']"),
    "an unregistered net": (lambda v: _set("model.net.type", "os.system"), "model.net.type=os.system"),
    "an unregistered op": (lambda v: _set("data.augment.shell", 1), "data.augment.shell: no augmentation"),
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
    assert restore.with_run_config(eval_cfg, honest).model.net.type == "simple_cnn"  # the run as written is admitted
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
    "an unregistered net": (lambda v: _set("net.type", "builtins.open"), "model.net.type=builtins.open"),
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


def test_imports_come_from_the_command_never_from_a_run(genuine, brisk_root, tmp_path, capsys):
    """A saved config holding a top-level `imports` is refused, and nothing it names is imported."""
    ckpt = write_run(tmp_path / "run", genuine, edit_config=lambda c: c.update(imports=["hostile_never_imported"]))
    out = tmp_path / "eval-out"
    capsys.readouterr()
    code = main_in_process("evaluate", ["trainer=cpu", f"ckpt_path={ckpt}", f"hydra.run.dir={out}"], brisk_root)
    captured = capsys.readouterr()
    assert_user_error(subprocess.CompletedProcess([], code, captured.out, captured.err), "refused imports=")
    assert "hostile_never_imported" not in sys.modules and not out.exists()


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
def test_an_older_runs_code_paths_are_read_as_names(with_config, genuine, eval_cfg, tmp_path):
    """Runs written before configs picked classes by name hold the shipped code paths, some from before the optimizer
    and the schedules moved to brisk.optim: they rebuild their model under the names, and nothing is imported by
    the old paths."""

    def edit(section: dict) -> None:
        net = section["net"] if "net" in section else section["model"]["net"]
        net["_target_"] = NET
        del net["type"]
        section["optimizer"] = {"_target_": "brisk.models.muon.MuonWithAdamW", "_partial_": True, "lr": 0.02}
        section["scheduler"] = {"_target_": "brisk.models.schedules.exp_decay", "_partial_": True, "k": 0.1}

    ckpt = write_run(tmp_path / "run", genuine, edit, edit if not with_config else None, with_config=with_config)
    cfg = restore.with_run_config(eval_cfg, ckpt)
    assert (cfg.model.net.type, cfg.optimizer.type, cfg.scheduler.type) == ("simple_cnn", "muon", "exp_decay")
    assert "brisk.models.muon" not in sys.modules
    restore.load_model(cfg, ckpt)
