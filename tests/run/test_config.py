"""Every option of every config group composes, and data, model and trainer instantiate from it."""

from __future__ import annotations

import importlib.util
import inspect
import math
from pathlib import Path

import lightning as L
import pytest
import torch
import torchvision
from hydra.utils import get_object
from lightning.pytorch.tuner import Tuner
from omegaconf import OmegaConf

from brisk import cli
from brisk.cli import CONFIG_PATH
from brisk.data import augment_ops
from brisk.data.base import TensorDataModule
from brisk.errors import BriskError
from brisk.optim import schedules
from brisk.registry import CALLBACKS, DATASETS, NETS, OPTIMIZERS, SCHEDULES
from brisk.run.builder import build_datamodule, build_model
from brisk.run.prepare import build_trainer
from brisk.run.schemas import FINDER_SET_BY_BRISK
from brisk.utils.config import plain
from brisk.utils.explain import explain
from helpers import TINY, compose_cfg

GROUPS = [
    "data",
    "augment",
    "model",
    "optimizer",
    "scheduler",
    "trainer",
    "strategy",
    "precision",
    "accumulation",
    "callbacks",
    "logger",
    "debug",
    "experiment",
]
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((Path(CONFIG_PATH) / g).glob("*.yaml"))]
EACH = sorted(p.stem for p in (Path(CONFIG_PATH) / "callbacks" / "each").glob("*.yaml"))
NEEDS = {("logger", "wandb"): "wandb", ("logger", "mlflow"): "mlflow", ("logger", "tensorboard"): "tensorboard"}
NEEDS |= {("model", "timm"): "timm", ("experiment", "finetune"): "timm"}
NEEDS_CUDA = {("strategy", "fsdp"), ("strategy", "deepspeed"), ("trainer", "gpu")}


def image_folder(root: Path) -> Path:
    """Two classes of one real image each: enough for the DataModule to know its classes."""
    for name in ("a", "b"):
        (root / "train" / name).mkdir(parents=True, exist_ok=True)
        torchvision.io.write_png(torch.zeros(3, 8, 8, dtype=torch.uint8), str(root / "train" / name / "0.png"))
    return root


def test_every_group_has_options():
    assert {g for g, _ in OPTIONS} == set(GROUPS)


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_instantiates(group, option, brisk_root):
    if (module := NEEDS.get((group, option))) and importlib.util.find_spec(module) is None:
        pytest.skip(f"the {module} extra is not installed")
    # the option under test replaces whatever TINY says about its own group
    own = {
        "data": ("data=", "data.synthetic"),
        "model": ("model.net",),
        "trainer": ("trainer.accelerator", "trainer.devices"),
        "experiment": ("model.net",),  # a recipe may choose another net
    }.get(group, ())
    overrides = [o for o in TINY if not o.startswith(own)] if own else TINY
    if (group, option) == ("data", "image_folder"):
        overrides = [*overrides, f"data.root={image_folder(brisk_root / 'images')}"]
    if (group, option) == ("experiment", "finetune"):  # its own data, an image folder; no weights here (offline)
        overrides = [o for o in overrides if not o.startswith("data")]
        overrides += [f"data.root={image_folder(brisk_root / 'images')}", "model.net.pretrained=false"]
    if (group, option) == ("logger", "wandb"):  # no account here: online, it is refused for want of a key
        overrides = [*overrides, "+logger.wandb.offline=true"]
    cfg = compose_cfg([*overrides, f"{group}={option}"], brisk_root)
    if missing := OmegaConf.missing_keys(cfg):  # `???`, as docs/data.md's `root: ???`: a value only its user has
        pytest.skip(
            f"{group}={option} composes; {', '.join(sorted(missing))} (???) is the user's to give, so nothing is built"
        )
    datamodule = build_datamodule(cfg)
    assert datamodule.hparams.batch_size > 0
    model = build_model(cfg, datamodule)
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, datamodule.num_classes)
    if (group, option) in NEEDS_CUDA and not torch.cuda.is_available():
        with pytest.raises(BriskError, match="CUDA"):
            build_trainer(cfg)
        return
    trainer = build_trainer(cfg)
    if group == "precision" and option not in ("auto", "16-mixed"):
        assert trainer.precision.startswith(option)
    if group == "accumulation" and option != "schedule":
        assert trainer.accumulate_grad_batches == int(option)


def test_cli_reads_like_the_docs(brisk_root):
    cfg = compose_cfg(["strategy=ddp", "precision=16-mixed", "accumulation=4"], brisk_root)
    assert (cfg.trainer.strategy, cfg.trainer.precision, cfg.trainer.accumulate_grad_batches) == ("ddp", "16-mixed", 4)


def test_a_config_path_of_the_users_own_sets_the_groups_brisk_reads(tmp_path):
    """With `--config-path`, Hydra composes from the user's tree: numeric options are those of that tree, and
    its groups may hold options brisk's conf/ does not have."""
    (tmp_path / "width").mkdir()
    (tmp_path / "width" / "64.yaml").write_text("{}\n")
    args = [f"--config-path={tmp_path}", "width=64", "accumulation=4"]
    assert cli.quote_group_options(args)[1:] == ["width='64'", "accumulation=4"]  # brisk's accumulation/ not read
    assert cli.quote_group_options(["accumulation=4"]) == ["accumulation='4'"]
    assert cli.unknown_group_option(["model=mine", "-cp", str(tmp_path)]) is None  # no model/ in that tree
    assert "no such option" in cli.unknown_group_option(["width=65", "-cp", str(tmp_path)])
    assert "no such option" in cli.unknown_group_option(["model=mine"])
    # Hydra reads a relative -cp beside the entry point's module: brisk leaves its options to Hydra.
    assert cli.unknown_group_option(["model=mine", "-cp", "myconf"]) is None
    assert cli.quote_group_options(["-cp", "myconf", "accumulation=4"])[-1] == "accumulation='4'"


def test_schedulers_step_with_the_optimizer(brisk_root):
    for option in ["onecycle", "cosine", "step", "exp_decay"]:
        cfg = compose_cfg([*TINY, f"scheduler={option}"], brisk_root)
        opt = OPTIMIZERS.build(cfg.optimizer, params=[torch.nn.Parameter(torch.zeros(1))])
        scheduler, interval = schedules.build(cfg.scheduler, opt, total_steps=lambda _: 100)
        lrs = []
        for _ in range(30):
            opt.step()
            scheduler.step()
            lrs.append(opt.param_groups[0]["lr"])
        assert interval in ("step", "epoch")
        assert len(set(lrs)) > 1 or option == "step", f"{option} never changed the learning rate"


def test_exp_decay_is_the_keras_recipe():
    """Keras: `lr if epoch < 10 else lr * exp(-0.1)`, called with the 0-based epoch at each epoch's start."""
    from brisk.optim.schedules import exp_decay

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = exp_decay(opt)
    ours, keras_lr = [], 1.0
    for epoch in range(14):
        keras_lr = keras_lr if epoch < 10 else keras_lr * math.exp(-0.1)
        ours.append((opt.param_groups[0]["lr"], keras_lr))
        opt.step()
        sched.step()
    assert [a for a, _ in ours] == pytest.approx([b for _, b in ours], rel=1e-12)
    assert [round(a, 4) for a, _ in ours[9:12]] == [1.0, 0.9048, 0.8187]


# YAML entries that copy a library's default so that `key=value` needs no `+`: (file, what it builds, the keys).
LIBRARY_DEFAULTS = [
    ("model/simple_cnn.yaml", "simple_cnn", ("net.dropout", "net.width")),
    ("model/resnet18.yaml", "resnet18", ("net.dropout",)),
    ("model/airbench.yaml", "airbench", ("net.dropout",)),
    (
        "data/image_folder.yaml",
        "brisk.data.image_folder.ImageFolderDataModule",
        ("root", "image_size", "skip_bad", "max_pixels", "cache_dir"),
    ),
]


def test_every_trainer_argument_is_a_key_with_lightnings_default(tmp_path):
    """brisk.run.schemas: any Trainer argument is set without a `+`, its default is Lightning's own, not a copy, and a
    value of the wrong type is refused while composing, naming the key."""
    cfg = compose_cfg(["trainer.benchmark=true", "trainer.num_sanity_val_steps=0"], tmp_path)
    assert (cfg.trainer.benchmark, cfg.trainer.num_sanity_val_steps) == (True, 0)
    own = set(OmegaConf.load(Path(CONFIG_PATH) / "trainer/default.yaml")) - {"defaults"}
    for name, parameter in inspect.signature(L.Trainer.__init__).parameters.items():
        if name not in ("self", "callbacks", "logger", "benchmark", "num_sanity_val_steps", *own):
            assert cfg.trainer[name] == parameter.default, name
    with pytest.raises(Exception) as error:
        compose_cfg(["trainer.max_epochs=ten"], tmp_path)
    assert explain(error.value).key == "trainer.max_epochs"


@pytest.mark.parametrize(
    "option, name, own",
    [
        ("ema", "ema", "callbacks/ema.yaml:ema"),
        ("swa", "swa", "callbacks/swa.yaml:swa"),
        ("default", "model_checkpoint", "callbacks/each/model_checkpoint.yaml"),
        ("default", "lr_monitor", "callbacks/each/lr_monitor.yaml"),
        ("early_stopping", "early_stopping", "callbacks/each/early_stopping.yaml"),
    ],
)
def test_a_lightning_callback_has_every_argument_with_its_classs_default(option, name, own, tmp_path):
    """brisk.run.schemas: a Lightning callback's file starts from its class's signature, so each argument is set
    without a `+` (callbacks.model_checkpoint.save_top_k=3) and the default is the class's own, not a copy kept
    equal by a test; the file (`own`, below the key after the colon) holds only what brisk sets differently."""
    node = compose_cfg([f"callbacks={option}"], tmp_path).callbacks[name]
    file, _, key = own.partition(":")
    written = OmegaConf.load(Path(CONFIG_PATH) / file)
    written = set((written.get(key) if key else written) or {}) - {"defaults"}
    parameters = inspect.signature(CALLBACKS.get(name).__init__).parameters
    defaults = {k: p.default for k, p in parameters.items() if k in node and k not in written}
    assert len(defaults) >= 2 and {k: node[k] for k in defaults} == defaults


@pytest.mark.parametrize(
    "group, name", [("optimizer", n) for n in ("sgd", "adam", "adamw")] + [("scheduler", n) for n in SCHEDULES.shipped]
)
def test_a_torch_optimizer_and_every_schedule_have_each_argument_with_its_default(group, name, tmp_path):
    """brisk.run.schemas: the option's file starts from the signature, so it holds only what brisk sets differently,
    any other argument works without a `+`, and a misspelt one is refused while composing, naming the nearest."""
    node = compose_cfg([f"{group}={name}"], tmp_path)[group]
    own = set(OmegaConf.load(Path(CONFIG_PATH) / f"{group}/{name}.yaml")) - {"defaults"}
    built = (OPTIMIZERS if group == "optimizer" else SCHEDULES).get(name)
    parameters = inspect.signature(built).parameters
    defaults = {k: p.default for k, p in parameters.items() if k in node and k not in own}
    assert {k: node[k] for k in defaults} == defaults and len(defaults) >= 1, node
    # what brisk passes or sets itself (epochs x steps_per_epoch: OneCycleLR's total_steps), what Lightning restores
    set_elsewhere = {"params", "optimizer", "total_steps", "epochs", "steps_per_epoch", "weight_decay", "last_epoch"}
    assert not set_elsewhere & set(node), node
    first = next(iter(defaults))
    with pytest.raises(Exception) as error:
        compose_cfg([f"{group}={name}", f"{group}.{first}x=1"], tmp_path)
    assert explain(error.value).key == f"{group}.{first}x" and f"did you mean {group}.{first}" in str(
        explain(error.value)
    )


@pytest.mark.parametrize("option, method", [("lr", "lr_find"), ("batch_size", "scale_batch_size")])
def test_a_finder_has_each_argument_of_its_tuner_method_with_lightnings_default(option, method, tmp_path):
    """brisk.run.schemas: tune/<option>.yaml starts from Tuner.<method>'s signature, less what brisk passes, so each
    argument is set without a `+` (tune.mode=linear) and its default is Lightning's; a wrong type is refused while
    composing, naming the key."""
    node = compose_cfg([f"tune={option}"], tmp_path).tune
    own = set(OmegaConf.load(Path(CONFIG_PATH) / f"tune/{option}.yaml")) - {"defaults"}
    parameters = inspect.signature(getattr(Tuner, method)).parameters
    defaults = {k: p.default for k, p in parameters.items() if k in node and k not in own | {"method"}}
    assert {k: node[k] for k in defaults} == defaults and len(defaults) >= 3, node
    assert node.method == method and not (FINDER_SET_BY_BRISK - {"method"}) & set(node)
    changed = compose_cfg([f"tune={option}", "tune.mode=linear"], tmp_path).tune
    assert changed.mode == "linear"  # no `+`: a finder's own check refuses a mode it lacks (test_hostile_values)
    number = next(k for k, v in defaults.items() if isinstance(v, int | float) and not isinstance(v, bool))
    with pytest.raises(Exception) as error:
        compose_cfg([f"tune={option}", f"tune.{number}=abc"], tmp_path)
    assert explain(error.value).key == f"tune.{number}"


@pytest.mark.parametrize("name", ["cifar10", "synthetic"])
def test_each_dataset_has_its_own_and_the_shared_arguments_with_their_defaults(name, tmp_path):
    """brisk.run.schemas: data/<name>.yaml starts from the DataModule's signature and its base's, so it holds only
    what brisk sets differently; every augmentation key is there at its off value; a wrong type or a misspelt key is
    refused while composing, naming the key (and the nearest)."""
    node = compose_cfg([f"data={name}", "data.augment.rotate=15"], tmp_path).data
    own = set(OmegaConf.load(Path(CONFIG_PATH) / f"data/{name}.yaml")) - {"defaults"}
    signatures = (DATASETS.get(name), TensorDataModule)
    parameters = {k: p for s in signatures for k, p in inspect.signature(s).parameters.items()}
    defaults = {k: p.default for k, p in parameters.items() if k in node and k not in own and k != "augment"}
    assert {k: node[k] for k in defaults} == defaults and {"batch_size", "split_seed", "dedup"} <= set(defaults)
    assert node.augment.rotate == 15 and set(augment_ops.off()) <= set(node.augment)
    assert not any(augment_ops.on(v) for k, v in node.augment.items() if k not in ("rotate", "crop_pad", "flip"))
    for override, key, hint in (
        ("data.batch_size=many", "data.batch_size", ""),
        ("data.batchsize=3", "data.batchsize", "data.batch_size"),
    ):
        with pytest.raises(Exception) as error:
            compose_cfg([f"data={name}", override], tmp_path)
        assert explain(error.value).key == key and hint in str(explain(error.value))


def test_a_dataset_of_ones_own_starts_from_the_shared_keys_and_adds_its_own(tmp_path):
    """docs/data.md's recipe: a data/<name>.yaml of the user's own starts from `/datamodule@_here_`, gets every
    shared key without a +, and adds keys that no schema knows."""
    conf = tmp_path / "conf"
    (conf / "data").mkdir(parents=True)
    (conf / "data" / "mine.yaml").write_text("defaults:\n  - /datamodule@_here_\n  - _self_\ntype: mine\nshards: 4\n")
    node = compose_cfg([f"hydra.searchpath=[file://{conf}]", "data=mine", "data.batch_size=64"], tmp_path).data
    assert (node.type, node.shards, node.batch_size, node.val_size) == ("mine", 4, 64, 5000)


@pytest.mark.parametrize("file, target, keys", LIBRARY_DEFAULTS, ids=[f for f, _, _ in LIBRARY_DEFAULTS])
def test_yaml_copies_of_a_default_stay_that_default(file, target, keys):
    """A copy drifts when the library changes its default; then the file must say why it differs, not copy."""
    node = OmegaConf.load(Path(CONFIG_PATH) / file)
    built = NETS.get(target) if file.startswith("model/") else get_object(target)  # a net by its registered name
    parameters = inspect.signature(built).parameters
    drifted = {k: (OmegaConf.select(node, k), parameters[k.rsplit(".", 1)[-1]].default) for k in keys}
    assert {k: v for k, v in drifted.items() if v[0] != v[1]} == {}


def test_callback_options_are_built_from_one_file_per_callback(tmp_path):
    """conf/callbacks/each/ holds each callback once, under its file's name: default is the files its defaults list
    names, early_stopping and lookahead add theirs to it, fast holds the last checkpoint alone. Read from conf/, so
    a callback added as README's "Add a callback" says keeps this green."""
    folder = Path(CONFIG_PATH) / "callbacks"
    listed = OmegaConf.load(folder / "default.yaml").defaults
    assert listed == [f"each/{key}@{key}" for key in (entry.rsplit("@", 1)[1] for entry in listed)]
    options = ("default", "fast", "early_stopping", "lookahead")
    default, fast, early, lookahead = (compose_cfg([f"callbacks={option}"], tmp_path) for option in options)
    assert list(default.callbacks) == [entry.rsplit("@", 1)[1] for entry in listed]
    assert (
        set(early.callbacks) == {*default.callbacks, "early_stopping"}
        and early.callbacks.early_stopping.monitor == "val/acc"
    )
    assert set(lookahead.callbacks) == {*default.callbacks, "lookahead"} and lookahead.callbacks.lookahead.every == 5
    assert set(fast.callbacks) == {"last_checkpoint"}
    assert fast.callbacks.last_checkpoint == default.callbacks.last_checkpoint
    assert fast.trainer.enable_progress_bar is False


@pytest.mark.parametrize("name", EACH, ids=EACH)
def test_each_callback_turns_on_alone_as_the_readme_says(name, tmp_path):
    """`+callbacks/each@callbacks.<name>=<name>` (extending.md: Add a callback) turns each file on, here beside no other
    callback, and its registered type builds from it."""
    cfg = compose_cfg(["callbacks=none", f"+callbacks/each@callbacks.{name}={name}"], tmp_path)
    assert list(cfg.callbacks) == [name]
    assert isinstance(CALLBACKS.build(plain(cfg.callbacks[name]), key=f"callbacks.{name}"), L.Callback)


@pytest.mark.parametrize("command", ["eval", "predict"])
def test_eval_and_predict_share_brisk_trains_model_block(command, tmp_path):
    """One model block: a knob the classifier takes is a key of every command without a `+`."""
    trained = compose_cfg([], tmp_path).model
    other = compose_cfg(["ckpt_path=x", "inputs=x"][: 1 + (command == "predict")], tmp_path, config_name=command).model
    assert {k: other[k] for k in other if k != "net"} == {k: v for k, v in trained.items() if k != "net"}
    given = ["ckpt_path=x", "inputs=x"][: 1 + (command == "predict")]
    assert compose_cfg([*given, "model.l1=0.001"], tmp_path, config_name=command).model.l1 == 0.001
