"""brisk-train tune=lr|batch_size: Lightning's Tuner instead of training.

The finder's value is printed as an override line (`optimizer.lr=0.0123`, `data.batch_size=256`), written
to tune.json, and, for the LR finder, drawn in lr_find.png; then the run ends without training, so the
value is a decision the user makes. The LR finder runs its whole range whatever trainer.max_epochs says, and
brisk reads its curve itself (brisk.search.lr_curve); a curve that suggests nothing is said in one line.
Both finders run in one process: Lightning's BatchSizeFinder refuses distributed strategies, and LR finding
under DDP would only repeat the same search on every rank.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
from pathlib import Path

import lightning as L
import numpy as np
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder
from lightning.pytorch.tuner import Tuner
from omegaconf import DictConfig, OmegaConf, open_dict

from brisk.errors import BriskError, check
from brisk.run import checks, devices
from brisk.run.builder import build_datamodule, build_model
from brisk.run.prepare import build_trainer
from brisk.run.schemas import FINDER_SET_BY_BRISK
from brisk.search import lr_curve
from brisk.utils.files import published, write_text

log = logging.getLogger("brisk")
DISTRIBUTED = ("ddp", "fsdp", "deepspeed")
# tune.method -> the finder callback whose modes Tuner takes (its own checks are an assert and a ValueError mid-run).
FINDERS = {"lr_find": LearningRateFinder, "scale_batch_size": BatchSizeFinder}
OPTIONS = {"lr_find": "lr", "scale_batch_size": "batch_size"}  # tune.method -> its option of the tune group


def refuse_distributed(cfg: DictConfig) -> None:
    """Stop before any process starts if the config asks for more than one."""
    trainer = cfg.trainer
    processes = devices.device_count(trainer) * devices.num_nodes(trainer)
    launched = max(int(os.environ.get(k, "1")) for k in ("WORLD_SIZE", "SLURM_NTASKS"))  # torchrun, srun
    strategy = str(trainer.get("strategy", "auto")).lower()
    if processes > 1 or launched > 1 or any(name in strategy for name in DISTRIBUTED):
        raise BriskError(
            f"tune={OPTIONS[cfg.tune.method]} runs in one process, and this "
            f"config asks for {max(processes, launched)} (trainer.devices x trainer.num_nodes, strategy={strategy}): "
            "Lightning's batch-size finder refuses distributed strategies, and its LR finder would only repeat the "
            "search on every rank. Run it with strategy=auto trainer.devices=1. data.batch_size is the global "
            "batch: an LR found there holds for DDP with the same data.batch_size, and a batch size found there "
            "is per device, so multiply it by the number of devices."
        )


def check_args(cfg: DictConfig) -> None:
    """The finder's arguments, before anything is built: Lightning takes a 0 or an unknown mode and fails mid-search
    (ZeroDivisionError, an assert), or with a TypeError for a key it does not take."""
    checks.complete(cfg)
    checks.values(cfg)  # brisk-train's seed and trainer.*: seed_everything raises on a seed out of range
    method = cfg.tune.get("method")
    if method not in FINDERS:
        raise BriskError(f"tune.method={method} is unknown: use tune=lr or tune=batch_size.")
    params = inspect.signature(getattr(Tuner, method)).parameters
    taken = set(params) - FINDER_SET_BY_BRISK
    if unknown := sorted(set(cfg.tune) - taken - {"method"}):
        other = next(m for m in FINDERS if m != method)  # tune=lr tune.method=scale_batch_size: the LR finder's keys
        if set(unknown) <= set(inspect.signature(getattr(Tuner, other)).parameters):
            raise BriskError(
                f"tune.method={method}: the tune group picks the finder. Use tune={OPTIONS[method]} instead."
            )
        raise BriskError(
            f"tune.{unknown[0]} is not an argument of Lightning's Tuner.{method}. Drop it; the finder takes: "
            f"{', '.join(f'tune.{k}' for k in sorted(taken))}."
        )
    args = {k: params[k].default for k in taken} | {k: cfg.tune[k] for k in taken if k in cfg.tune}
    if method == "lr_find":
        for key in ("min_lr", "max_lr"):
            check(f"tune.{key}", args[key], lambda v: v > 0, "a number > 0")
        check("tune.num_training", args["num_training"], lambda v: v >= 1, "a whole number >= 1", int)
        if args["early_stop_threshold"] is not None:  # null: the finder never stops early
            check("tune.early_stop_threshold", args["early_stop_threshold"], lambda v: v > 0, "a number > 0 (or null)")
    else:
        for key in ("init_val", "max_trials", "steps_per_trial", "max_val"):
            check(f"tune.{key}", args[key], lambda v: v >= 1, "a whole number >= 1", int)
        # margin: the share binsearch takes off the size it found
        check("tune.margin", args["margin"], lambda v: 0 <= v < 1, "a number in [0, 1)")
    modes = sorted(FINDERS[method].SUPPORTED_MODES, key=lambda m: m != params["mode"].default)  # the default first
    if str(args["mode"]).lower() not in modes:  # Lightning lowercases it
        raise BriskError(f"tune.mode={args['mode']} is unknown for Tuner.{method}: use {' or '.join(modes)}.")
    if method == "lr_find" and not args["min_lr"] < args["max_lr"]:
        raise BriskError(
            f"tune.min_lr={args['min_lr']} must be below tune.max_lr={args['max_lr']}: the finder raises the LR "
            "from the one to the other."
        )


def tune(cfg: DictConfig) -> None:
    check_args(cfg)
    refuse_distributed(cfg)
    L.seed_everything(cfg.seed, workers=True)
    args = OmegaConf.to_container(cfg.tune, resolve=True)
    method = args.pop("method")
    if method == "lr_find":
        cfg = _whole_range(cfg, args["num_training"])
    else:  # the trials step one optimizer and schedule in turn, past a planned schedule's end (OneCycleLR: "Tried to
        # step 12 times" of 11, four 3-step trials in a 1-epoch run); what fits in memory does not depend on the lr
        cfg = cfg.copy()
        with open_dict(cfg):
            cfg.scheduler = None
    # The model first, as brisk-train builds it: what it refuses (an optimizer's momentum) stops before the Trainer.
    datamodule = build_datamodule(cfg)
    model = build_model(cfg, datamodule)  # its net's own input statistics, if any, go to this DataModule
    trainer = build_trainer(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    tuner = Tuner(trainer)
    result: dict = {"method": method, "args": args}
    if method == "lr_find":
        # update_attr=False: the LR lives in optimizer.lr of the config, which the finder cannot reach; brisk
        # prints it instead. The finder sets each param group's LR itself, so it needs no attribute.
        finder = tuner.lr_find(model, datamodule=datamodule, update_attr=False, **args)
        recorded = finder.results if finder is not None else {"lr": [], "loss": []}
        found = lr_curve.suggest(recorded["lr"], lr_curve.unsmooth(recorded["loss"]))
        result["plot"] = _plot(found, run_dir / "lr_find.png")
        result["reason"] = found.reason
        result["curve"] = {"lr": found.lrs, "loss": found.losses, "smoothed": found.smoothed}
        if found.lr is None:  # one line in place of the value; tune.json holds "override": null
            result["override"] = None
            line = f"tune=lr suggests no learning rate: {found.reason}. See lr_find.png."
        else:
            line = result["override"] = f"optimizer.lr={found.lr:.3g}"
    else:  # scale_batch_size (check_args refused any other)
        # A batch larger than the training split yields no batches, which Lightning's power scaling counts as a
        # success, and its max_val stops it on a size it never tried (lightning 2.6.6: 2048 "fits" 1500 images).
        # So the doublings stop at the split's size (in whole batches, from the loader's length).
        datamodule.prepare_data()  # download or generate: read here, before the fit in which Lightning would do it
        datamodule.setup("fit")
        n_train = len(datamodule.train_dataloader()) * datamodule.hparams.batch_size
        if n_train < args["init_val"]:
            raise BriskError(f"tune.init_val={args['init_val']} is larger than the {n_train} training images.")
        args["max_trials"] = min(args["max_trials"], int(math.log2(n_train / args["init_val"])) + 1)
        # Lightning finds data.batch_size in the DataModule's hparams (lightning_getattr) and sets it there.
        size = tuner.scale_batch_size(model, datamodule=datamodule, batch_arg_name="batch_size", **args)
        line = result["override"] = f"data.batch_size={size}"
    write_text(run_dir / "tune.json", json.dumps(result, indent=2) + "\n")
    print(line, flush=True)
    print(run_dir, flush=True)  # the last line: the run directory


def _whole_range(cfg: DictConfig, num_training: int) -> DictConfig:
    """The config with the fit loop's limits lifted to the finder's steps. Lightning's finder sets max_steps but
    keeps max_epochs: the shipped max_epochs=10 at 3 batches an epoch cut a 100-step search at 30 steps, and Lightning
    then says it "stopped early due to diverging loss" (it says so whenever fewer steps ran). max_epochs=-1 alone
    would make trainer.estimated_stepping_batches infinite, which the onecycle schedule cannot take, so
    max_steps=num_training bounds it (the finder replaces the schedule anyway)."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.trainer.max_epochs, cfg.trainer.max_steps = -1, num_training
        cfg.trainer.min_epochs = cfg.trainer.min_steps = None  # they would keep the finder going past a divergence
    return cfg


def _plot(found: lr_curve.Suggestion, path: Path) -> str | None:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.info("lr_find.png skipped: matplotlib is not installed (pip install -e '.[plots]')")
        return None
    fig = Figure(figsize=(5, 3.5), layout="constrained")
    ax = fig.subplots()
    ax.plot(found.lrs, found.losses, color="0.75", linewidth=0.8, label="loss per step")
    ax.plot(found.lrs, found.smoothed, color="C0", label="smoothed")
    if found.index is not None:
        i = found.index
        ax.plot(found.lrs[i], found.smoothed[i], "o", color="red", label=f"suggested: {found.lr:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("training loss")
    if found.smoothed:  # a divergence's losses (35 after 2.5, measured) would flatten the rest into one line
        smoothed = np.asarray(found.smoothed)
        ax.set_ylim(top=smoothed[: smoothed.argmin() + 1].max() * 1.25)
    ax.legend(fontsize="small")
    ax.set_title("LR finder: training loss by learning rate")
    with published(path) as tmp:
        fig.savefig(tmp, dpi=110)
    return str(path)
