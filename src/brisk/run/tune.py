"""brisk-train tune=lr|batch_size: Lightning's Tuner instead of training.

The finder's value is printed as an override line (`optimizer.lr=0.0123`, `data.batch_size=256`), written
to tune.json, and, for the LR finder, drawn in lr_find.png; then the run ends without training, so the
value is a decision the user makes. Both finders run in one process: Lightning's BatchSizeFinder refuses
distributed strategies, and LR finding under DDP would only repeat the same search on every rank.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder
from lightning.pytorch.tuner import Tuner
from omegaconf import DictConfig, OmegaConf

from brisk.errors import BriskError
from brisk.run import checks
from brisk.run.builder import build_datamodule, build_model
from brisk.run.prepare import build_trainer

log = logging.getLogger("brisk")
DISTRIBUTED = ("ddp", "fsdp", "deepspeed")
# tune.method -> the finder callback whose modes Tuner takes (its own checks are an assert and a ValueError mid-run).
FINDERS = {"lr_find": LearningRateFinder, "scale_batch_size": BatchSizeFinder}
# The finders' arguments that brisk passes itself: the model, its data, the stage, where the value goes.
SET_BY_BRISK = {"self", "model", "datamodule", "method", "update_attr", "attr_name", "batch_arg_name"}
SET_BY_BRISK |= {"train_dataloaders", "val_dataloaders", "dataloaders"}


def refuse_distributed(cfg: DictConfig) -> None:
    """Stop before any process starts if the config asks for more than one."""
    trainer = cfg.trainer
    processes = checks.device_count(trainer) * checks.num_nodes(trainer)
    launched = max(int(os.environ.get(k, "1")) for k in ("WORLD_SIZE", "SLURM_NTASKS"))  # torchrun, srun
    strategy = str(trainer.get("strategy", "auto")).lower()
    if processes > 1 or launched > 1 or any(name in strategy for name in DISTRIBUTED):
        raise BriskError(
            f"tune={cfg.tune.method.removesuffix('_find').replace('scale_', '')} runs in one process, and this "
            f"config asks for {max(processes, launched)} (trainer.devices x trainer.num_nodes, strategy={strategy}): "
            "Lightning's batch-size finder refuses distributed strategies, and its LR finder would only repeat the "
            "search on every rank. Run it with strategy=auto trainer.devices=1. data.batch_size is the global "
            "batch: an LR found there holds for DDP with the same data.batch_size, and a batch size found there "
            "is per device, so multiply it by the number of devices."
        )


def check_args(cfg: DictConfig) -> None:
    """The finder's arguments, before anything is built: Lightning takes a 0 or an unknown mode and fails mid-search
    (ZeroDivisionError, an assert), or with a TypeError for a key it does not take."""
    checks.values(cfg, checks.TUNE)  # brisk-train's values too: seed_everything raises on a seed out of range
    method = cfg.tune.get("method")
    if method not in FINDERS:
        raise BriskError(f"tune.method={method} is unknown: use tune=lr or tune=batch_size.")
    params = inspect.signature(getattr(Tuner, method)).parameters
    taken = set(params) - SET_BY_BRISK
    if unknown := sorted(set(cfg.tune) - taken - {"method"}):
        raise BriskError(
            f"tune.{unknown[0]} is not an argument of Lightning's Tuner.{method}. Drop it; the finder takes: "
            f"{', '.join(f'tune.{k}' for k in sorted(taken))}."
        )
    args = {k: params[k].default for k in taken} | {k: cfg.tune[k] for k in taken if k in cfg.tune}
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
    trainer, datamodule, model = build_trainer(cfg), build_datamodule(cfg), build_model(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    tuner = Tuner(trainer)
    result: dict = {"method": method, "args": args}
    if method == "lr_find":
        # update_attr=False: the LR lives in optimizer.lr of the config, which the finder cannot reach; brisk
        # prints it instead. The finder sets each param group's LR itself, so it needs no attribute.
        finder = tuner.lr_find(model, datamodule=datamodule, update_attr=False, **args)
        lr = finder.suggestion() if finder is not None else None
        if lr is None:
            raise BriskError(
                "the LR finder recorded too few finite losses to suggest a learning rate: raise tune.num_training "
                "or lower tune.max_lr."
            )
        result["plot"] = _plot(finder, run_dir / "lr_find.png")
        line = f"optimizer.lr={lr:.3g}"
    else:  # scale_batch_size (check_args refused any other)
        # A batch larger than the training split yields no batches, which Lightning's power scaling counts as a
        # success, and its max_val stops it on a size it never tried (lightning 2.6.6: 2048 "fits" 1500 images).
        # So the doublings stop at the split's size (in whole batches, from the loader's length).
        datamodule.setup("fit")
        n_train = len(datamodule.train_dataloader()) * datamodule.hparams.batch_size
        if n_train < args["init_val"]:
            raise BriskError(f"tune.init_val={args['init_val']} is larger than the {n_train} training images.")
        args["max_trials"] = min(args["max_trials"], int(math.log2(n_train / args["init_val"])) + 1)
        # Lightning finds data.batch_size in the DataModule's hparams (lightning_getattr) and sets it there.
        size = tuner.scale_batch_size(model, datamodule=datamodule, batch_arg_name="batch_size", **args)
        line = f"data.batch_size={size}"
    result["override"] = line
    (run_dir / "tune.json").write_text(json.dumps(result, indent=2) + "\n")
    print(line, flush=True)
    print(run_dir, flush=True)  # the last line: the run directory


def _plot(finder, path: Path) -> str | None:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.info("lr_find.png skipped: matplotlib is not installed (pip install -e '.[plots]')")
        return None
    fig = Figure(figsize=(5, 3.5), layout="constrained")
    ax = fig.subplots()
    finder.plot(suggest=True, ax=ax)  # Lightning labels the axes (learning rate, loss) and marks the suggestion
    ax.set_title("LR finder: training loss by learning rate")
    fig.savefig(path, dpi=110)
    return str(path)
