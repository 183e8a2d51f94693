"""Nothing a checkpoint or a saved run config says decides what is called; eval scores the data its run trained on;
a checkpoint with a non-finite tensor is never written; summary.json and eval.json are strict JSON."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from brisk.callbacks import DivergenceGuard
from brisk.callbacks.divergence_guard import Diverged
from brisk.checkpoints.legacy import renamed
from brisk.errors import BriskError
from brisk.evaluate import evaluate
from brisk.run import summary as run_summary
from brisk.run.builder import build_model
from helpers import FINISHED, TINY, compose_cfg, main_in_process, read_summary

DATA = [o for o in TINY if o.startswith("data")]
EVAL = ["trainer=cpu"]


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file that a crafted checkpoint tries to truncate with builtins.open(victim, "w")."""
    path = tmp_path / "precious.txt"
    path.write_text("keep me")
    return path


def opens(path: Path) -> dict:
    return {"_target_": "builtins.open", "_args_": [str(path), "w"]}


def crafted_checkpoint(folder: Path, victim: Path, brisk_root: Path) -> Path:
    """Real weights of a TINY model, with hyper_parameters.net naming builtins.open: plain data, so it loads
    under weights_only=True."""
    model = build_model(compose_cfg(TINY, brisk_root))
    hparams = {**dict(model.hparams), "net": opens(victim)}
    folder.mkdir(parents=True, exist_ok=True)
    ckpt = folder / "crafted.ckpt"
    torch.save(
        {"state_dict": model.state_dict(), "hyper_parameters": hparams, "pytorch-lightning_version": L.__version__},
        ckpt,
    )
    return ckpt


def test_crafted_hparams_are_refused_not_called(victim, tmp_path, brisk_root):
    # No run config beside it: the model comes from the checkpoint's hyperparameters, checked against the registry.
    ckpt = crafted_checkpoint(tmp_path / "loose", victim, brisk_root)
    cfg = compose_cfg([*DATA, *EVAL, f"ckpt_path={ckpt}"], brisk_root, config_name="eval")
    with pytest.raises(BriskError, match=r"refused model\.net\._target_=builtins\.open"):
        evaluate(cfg)
    assert victim.read_text() == "keep me"


def test_crafted_hparams_inside_a_run_are_ignored(victim, finished_run, tmp_path, brisk_root):
    # Beside a real run config, the checkpoint's hyperparameters are not even read: only its tensors are.
    run = tmp_path / "run"
    shutil.copytree(finished_run / ".hydra", run / ".hydra")
    real = torch.load(finished_run / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    torch.save({**real, "hyper_parameters": {**real["hyper_parameters"], "net": opens(victim)}}, ckpt)
    assert main_in_process("evaluate", [*EVAL, f"ckpt_path={ckpt}"], brisk_root) == 0
    assert victim.read_text() == "keep me"


def test_a_crafted_run_config_is_refused(victim, finished_run, tmp_path, brisk_root):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")
    saved.data.augment = {"_target_": "builtins.print", "_args_": ["pwned"], "file": opens(victim)}
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")
    cfg = compose_cfg([*EVAL, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"], brisk_root, config_name="eval")
    with pytest.raises(BriskError, match=r"config\.yaml: refused data\.augment\._target_=builtins\.print"):
        evaluate(cfg)
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize(
    "target",
    [
        "builtins.open",
        "os.system",
        "subprocess.Popen",
        "brisk.models.classifier.torch.save",  # under brisk.models by path, but torch's function
        "brisk.data.synthetic.write",  # brisk's, but writes files wherever told
        "brisk.models.no_such_thing",
        "torch.optim.SGD.__init__.__globals__",
        "brisk.models.nets.simple_cnn.SimpleCNN",  # brisk's net, but not by the exact path earlier brisk wrote
        "torch.optim.SGD",  # an earlier brisk's optimizer, but not at the optimizer's place
        "torch.nn.Identity",  # a class, but no file names code: a user's net is registered and named by `type`
    ],
)
def test_a_code_path_in_a_file_is_refused(target):
    from brisk.checkpoints import restore

    for content, place in (
        ({"model": {"net": {"_target_": target}}}, "model.net"),
        ({"model": {"net": {"type": "simple_cnn", "block": {"deep": {"_target_": target}}}}}, "model.net.block.deep"),
        ({"data": {"type": "synthetic", "augment": [{"_target_": target}]}}, r"data.augment\[0\]"),
    ):
        with pytest.raises(BriskError, match=f"a file: refused {place}._target_={target}:"):
            restore.check(renamed(content), "a file")


@pytest.mark.parametrize("key", ["_partial_", "_args_", "_recursive_", "_convert_", "imports"])
def test_hydra_keys_and_imports_in_a_file_are_refused(key):
    from brisk.checkpoints import restore

    with pytest.raises(BriskError, match=f"refused optimizer.{key}="):
        restore.check({"optimizer": {"type": "sgd", key: ["os"]}}, "a file")
    with pytest.raises(BriskError, match=f"refused {key}="):
        restore.check({key: ["os"], "model": {"net": {"type": "simple_cnn"}}}, "a file")


def test_a_file_picks_only_registered_names_and_old_code_paths_still_read():
    from brisk.checkpoints import restore

    shipped = {"model": {"net": {"type": "airbench"}}, "optimizer": {"type": "muon"}, "data": {"type": "cifar10"}}
    restore.check(shipped, "a file")
    for place, content in (
        ("model.net", {"model": {"net": {"type": "resnet99"}}}),
        ("optimizer", {"model": {"net": {"type": "simple_cnn"}}, "optimizer": {"type": "simple_cnn"}}),
        ("data", {"data": {"type": None}}),
    ):
        with pytest.raises(BriskError, match=rf"a file: refused {place}\.type=.*no \w+ is registered"):
            restore.check(content, "a file")
    earlier = {  # what runs written before names replaced code paths hold: read as names, nothing imported
        "model": {"_target_": "brisk.models.ImageClassifier", "net": {"_target_": "brisk.models.nets.AirbenchNet"}},
        "optimizer": {"_target_": "brisk.models.muon.MuonWithAdamW", "_partial_": True},
        "scheduler": {"_target_": "torch.optim.lr_scheduler.OneCycleLR", "_partial_": True, "interval": "step"},
        "data": {"_target_": "brisk.data.CIFAR10DataModule"},
    }
    restore.check(renamed(earlier), "a file")
    assert earlier == {
        "model": {"net": {"type": "airbench"}},
        "optimizer": {"type": "muon"},
        "scheduler": {"interval": "step", "type": "onecycle"},
        "data": {"type": "cifar10"},
    }


def test_eval_scores_the_data_its_run_trained_on(finished_run, tmp_path, brisk_root):
    # The run trained on data.synthetic.seed=3; eval gets no data overrides at all.
    s = read_summary(finished_run)
    args = [*EVAL, f"ckpt_path={s['ckpt_path']}", f"hydra.run.dir={tmp_path}"]
    assert main_in_process("evaluate", args, brisk_root) == 0
    out = json.loads((tmp_path / "eval.json").read_text())
    assert out["ckpt_path"] == s["ckpt_path"]
    assert out["metrics"]["test/acc"] == pytest.approx(s["metrics"]["test/acc"], abs=1e-6)


def test_command_line_wins_over_the_run_config(finished_run, brisk_root):
    from brisk.checkpoints import restore

    ckpt = finished_run / "checkpoints" / "last.ckpt"
    # `+`: Hydra's rule for keys that eval's own data config (cifar10) does not list
    overrides = ["+data.synthetic.seed=4", "+data.eval_batch_size=50", "data.val_size=7"]
    cfg = compose_cfg([*EVAL, *overrides, f"ckpt_path={ckpt}"], brisk_root, config_name="eval")
    merged = restore.with_run_config(cfg, ckpt, overrides)
    assert (merged.data.synthetic.seed, merged.data.eval_batch_size, merged.data.val_size) == (4, 50, 7)
    assert merged.data.synthetic.n_train == 2000 and merged.model.net.width == 8  # the rest is the run's
    assert restore.with_run_config(cfg, ckpt).data.synthetic.seed == 3
    # A group option replaces the run's whole section: data=synthetic is the synthetic defaults.
    cfg = compose_cfg([*EVAL, "data=synthetic", f"ckpt_path={ckpt}"], brisk_root, config_name="eval")
    assert restore.with_run_config(cfg, ckpt, ["data=synthetic"]).data.synthetic.n_train == 10000


def test_checkpoint_without_its_run_rebuilds_from_hparams(finished_run, tmp_path, brisk_root, caplog):
    from brisk.checkpoints import restore

    ckpt = tmp_path / "moved.ckpt"
    shutil.copy(finished_run / "checkpoints" / "last.ckpt", ckpt)
    cfg = compose_cfg([*DATA, *EVAL, f"ckpt_path={ckpt}"], brisk_root, config_name="eval")
    model = restore.load_model(restore.with_run_config(cfg, ckpt), ckpt)
    assert ".hydra/config.yaml not found" in caplog.text
    want = torch.load(ckpt, weights_only=True)["state_dict"]
    assert all(torch.equal(v, want[k]) for k, v in model.state_dict().items())


def _break_config(run: Path, text: str) -> None:
    (run / ".hydra" / "config.yaml").write_text(text)


def _drop_model(run: Path) -> None:
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")
    del saved["model"]
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")


def _no_state_dict(run: Path) -> None:
    ckpt = run / "checkpoints" / "last.ckpt"
    torch.save({k: v for k, v in torch.load(ckpt, weights_only=True).items() if k != "state_dict"}, ckpt)


def _other_weights(run: Path) -> None:
    ckpt = run / "checkpoints" / "last.ckpt"
    real = torch.load(ckpt, weights_only=True)
    torch.save({**real, "state_dict": {"net.0.weight": torch.zeros(4, 3, 3, 3)}}, ckpt)


def _env_target(run: Path) -> None:
    saved = OmegaConf.load(run / ".hydra" / "config.yaml")
    saved.model.net.type = "${oc.env:BRISK_EVIL_TARGET,simple_cnn}"
    OmegaConf.save(saved, run / ".hydra" / "config.yaml")


DAMAGED = {
    # what is done to a copy of a finished run: what the one error line must say
    "config_not_yaml": (lambda run: _break_config(run, "model: [unclosed\n"), "cannot be read as a run config"),
    "config_a_list": (lambda run: _break_config(run, "- 1\n- 2\n"), "not a run config"),
    "config_without_model": (_drop_model, "names no model.net"),
    "checkpoint_without_weights": (_no_state_dict, "holds no state_dict"),
    "weights_of_another_net": (_other_weights, "its weights do not fit model.net.type=simple_cnn"),
    "target_from_an_interpolation": (_env_target, "refused model.net.type=${oc.env:BRISK_EVIL_TARGET"),
}


@pytest.mark.parametrize("case", DAMAGED, ids=list(DAMAGED))
def test_a_damaged_run_is_one_clear_error(case, finished_run, tmp_path, brisk_root):
    from brisk.checkpoints import restore

    damage, says = DAMAGED[case]
    run = tmp_path / "run"
    shutil.copytree(finished_run / ".hydra", run / ".hydra")
    shutil.copytree(finished_run / "checkpoints", run / "checkpoints")
    damage(run)
    ckpt = run / "checkpoints" / "last.ckpt"
    cfg = compose_cfg([*EVAL, f"ckpt_path={ckpt}"], brisk_root, config_name="eval")
    with pytest.raises(BriskError) as refused:
        restore.load_model(restore.with_run_config(cfg, ckpt), ckpt)
    assert says in str(refused.value) and "\n" not in str(refused.value)


# -- no checkpoint with a non-finite tensor ---------------------------------------------------------------------


@pytest.fixture
def model_and_trainer(brisk_root):
    model = build_model(compose_cfg(TINY, brisk_root))
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    return model, trainer


def test_good_state_passes(model_and_trainer):
    model, trainer = model_and_trainer  # val_acc_best starts at -inf, by design: not a reason to refuse
    DivergenceGuard().on_save_checkpoint(trainer, model, {})


def test_inf_batchnorm_buffer_refuses_the_checkpoint(model_and_trainer):
    model, trainer = model_and_trainer
    bn = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    bn.running_var.fill_(math.inf)  # what lr=1e6 leaves while the weights are still finite
    assert all(torch.isfinite(p).all() for p in model.parameters())
    with pytest.raises(Diverged, match="no checkpoint was written"):
        DivergenceGuard().on_save_checkpoint(trainer, model, {})


def test_nan_optimizer_state_refuses_the_checkpoint(model_and_trainer):
    model, trainer = model_and_trainer
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    p = next(model.parameters())
    optimizer.state[p]["momentum_buffer"] = torch.full_like(p, math.nan)
    trainer.optimizers = [optimizer]
    with pytest.raises(Diverged):
        DivergenceGuard().on_save_checkpoint(trainer, model, {})


def test_nan_in_muons_inner_state_refuses_the_checkpoint(model_and_trainer):
    """MuonWithAdamW keeps its state in its inner Muon and AdamW: the checkpoint (its state_dict) holds it there."""
    from brisk.optim.muon import MuonWithAdamW

    model, trainer = model_and_trainer
    optimizer = MuonWithAdamW(model.parameters(), lr=0.01)
    model(torch.zeros(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    assert not optimizer.state and optimizer.muon.state  # the outer state is empty: the guard must look inside
    for value in next(iter(optimizer.muon.state.values())).values():
        if value.is_floating_point():
            value.fill_(math.nan)
    trainer.optimizers = [optimizer]
    with pytest.raises(Diverged, match="no checkpoint was written"):
        DivergenceGuard().on_save_checkpoint(trainer, model, {})


def test_summary_is_strict_json(tmp_path):
    path = tmp_path / "eval.json"
    run_summary.write(path, {"metrics": {"test/loss": math.nan, "test/acc": 0.5}, "x": [math.inf, -math.inf]})

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    got = json.loads(path.read_text(), parse_constant=refuse)
    assert got == {"metrics": {"test/loss": None, "test/acc": 0.5}, "x": [None, None]}


def test_one_epoch_run_names_its_last_checkpoint(finished_run):
    assert "trainer.max_epochs=1" in FINISHED  # epoch 0 is the best: the case that gave ""
    assert read_summary(finished_run)["last_ckpt_path"] == str(finished_run / "checkpoints" / "last.ckpt")


def test_a_run_written_before_names_still_evaluates(tmp_path, brisk_root):
    """tests/fixtures/run_before_names: a real run of brisk before configs picked classes by name (its config and
    checkpoint name `_target_` code paths). brisk-eval rebuilds it through the registries, by the names those paths
    read as (brisk.checkpoints.legacy), and scores what that brisk's own eval scored on the same generated data."""
    fixture = Path(__file__).parents[1] / "fixtures" / "run_before_names"
    run = tmp_path / "run"
    shutil.copytree(fixture, run)
    assert "_target_: brisk.models.nets.SimpleCNN" in (run / ".hydra" / "config.yaml").read_text()
    ckpt = run / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=True)["hyper_parameters"]["net"]["_target_"] == "brisk.models.nets.SimpleCNN"
    args = [*EVAL, f"ckpt_path={ckpt}", f"data.root={tmp_path / 'data'}", f"hydra.run.dir={tmp_path / 'eval'}"]
    assert main_in_process("evaluate", args, brisk_root) == 0
    got = json.loads((tmp_path / "eval" / "eval.json").read_text())["metrics"]
    want = json.loads((fixture / "expected.json").read_text())["eval_metrics"]
    assert got == pytest.approx(want, abs=1e-6)
