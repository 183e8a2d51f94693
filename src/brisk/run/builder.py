"""The one builder: a composed config in, the Trainer, DataModule and LightningModule out. It builds, and refuses
only what a part it builds would find out inside the fit (make_trainer): checking the config and the disk, and
starting a job's other ranks, are steps of their own (train.py takes them one by one, brisk.run.prepare all at once
for the other commands).
"""

from __future__ import annotations

from typing import NoReturn

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, StochasticWeightAveraging
from omegaconf import DictConfig, OmegaConf

from brisk import fastloop
from brisk.callbacks import ModelSummary
from brisk.checkpoints.io import SafeCheckpointIO
from brisk.errors import BriskError, check
from brisk.models.build import build_datamodule, build_model
from brisk.models.classifier import FIT_METRICS
from brisk.registry import CALLBACKS, LOGGERS, PROFILERS, Registry, check_arguments, construct
from brisk.run import loggers
from brisk.run.precision import resolve
from brisk.utils.config import plain

__all__ = ["PROMISES", "always_on", "build_datamodule", "build_model", "check_always_on", "make_trainer"]


def _build_all(registry: Registry, group: DictConfig | None, key: str) -> list[tuple]:
    """(built, its arguments) for every entry of a name -> config mapping (callbacks, loggers), by its `type`; null
    entries are off."""
    specs = [(name, plain(c)) for name, c in (group or {}).items() if c is not None]
    return [(registry.build(spec, key=f"{key}.{name}"), spec) for name, spec in specs]


def make_trainer(cfg: DictConfig, extra_callbacks: list[L.Callback] = ()) -> L.Trainer:
    """The Trainer of `cfg`, with brisk's checkpoint IO and `extra_callbacks`; starts nothing. It checks only what
    its parts would find out inside the fit, as their constructors check their ranges: early stopping's values, the
    loggers' folders and wandb's key."""
    precision = resolve(cfg.trainer.precision, str(cfg.trainer.accelerator))
    fast = cfg.get("fast_loop", True)  # brisk.fastloop's per-step cuts; false: plain Lightning
    check_early_stopping(cfg)
    check_swa(cfg)
    check_lr_monitor(cfg)
    configured = _build_all(CALLBACKS, cfg.get("callbacks"), "callbacks")
    callbacks = [*(c for c, _ in configured), *extra_callbacks]
    if cfg.trainer.get("enable_model_summary") is not False:  # Lightning's, with the FLOPs of one image counted
        callbacks.append(ModelSummary())
    # Checkpoints are written by temp file + rename and always read with weights_only=True.
    arguments = plain(cfg.trainer)
    del arguments["precision"]  # resolved above
    check_arguments(L.Trainer, arguments, "trainer")
    plugins = [SafeCheckpointIO(), *(arguments.pop("plugins", None) or [])]  # Lightning takes names ("...") too
    for name, spec in (cfg.get("logger") or {}).items():  # before any is built, so none has made its folder
        if spec is not None:
            loggers.check(f"logger.{name}", plain(spec))
    profiler = arguments.pop("profiler", None)
    if isinstance(profiler, dict):  # {type: simple, dirpath: ...}; a bare name is Lightning's to read
        profiler = PROFILERS.build(profiler)
    trainer = construct(
        L.Trainer,
        "trainer",
        **arguments,
        precision=precision,
        callbacks=callbacks,
        logger=[logger for logger, _ in _build_all(LOGGERS, cfg.get("logger"), "logger")],
        plugins=plugins,
        profiler=profiler or (fastloop.NoProfiler() if fast else None),
    )
    if fast:
        fastloop.trainer(trainer, configured)
    return trainer


def _callbacks_of(cfg: DictConfig, kind: type):
    """(key, config) of each entry of the callbacks group, by any name, that builds a `kind`: not those that are off,
    nor an unknown type, which is refused as the callbacks are built."""
    for name, spec in (cfg.get("callbacks") or {}).items():
        entry = spec.get("type") if spec is not None else None
        if entry in CALLBACKS and issubclass(CALLBACKS.get(entry), kind):
            yield f"callbacks.{name}", spec


def check_early_stopping(cfg: DictConfig) -> None:
    """Refuse, before the fit, an early stopping that could only fail inside it: Lightning takes any patience and
    monitor, and compares or looks them up only after the first epoch's steps (a string patience at the second
    validation; a metric nobody logs, or a val/ metric with validation off, at the first check), when the run has
    trained and keeps its directory."""
    for key, spec in _callbacks_of(cfg, EarlyStopping):
        monitor = spec.get("monitor")
        if "patience" in spec:  # Lightning's default, 3, otherwise
            check(f"{key}.patience", spec.patience, lambda v: v >= 0, "a whole number >= 0 (validations)", int)
        if monitor not in FIT_METRICS:
            raise BriskError(
                f"{key}.monitor={monitor!r} must be a metric the classifier logs each epoch: {', '.join(FIT_METRICS)}.",
                f"{key}.monitor",
            )
        if str(monitor).startswith("val/") and cfg.trainer.get("limit_val_batches") == 0:
            _without_validation(key, monitor, "trainer.limit_val_batches=0 turns off", "trainer.limit_val_batches=1.0")


def check_swa(cfg: DictConfig) -> None:
    """Lightning's SWA that would start after the last epoch never averages, yet still runs its extra epoch, which
    steps a planned schedule past its end (OneCycleLR: "Tried to step 23 times"): refused before the fit."""
    max_epochs = cfg.trainer.get("max_epochs")
    for key, spec in _callbacks_of(cfg, StochasticWeightAveraging):
        start = spec.get("swa_epoch_start")  # Lightning's default 0.8 from the schema: a share
        if isinstance(start, int) and isinstance(max_epochs, int) and 0 < max_epochs < start:
            raise BriskError(
                f"{key}.swa_epoch_start={start} is after the run's last epoch (trainer.max_epochs={max_epochs}), "
                f"so SWA would never average. Start it at an epoch up to {max_epochs}, or give a share of the "
                f"epochs ({key}.swa_epoch_start=0.8).",
                f"{key}.swa_epoch_start",
            )


def check_lr_monitor(cfg: DictConfig) -> None:
    """Lightning's LearningRateMonitor writes to the run's loggers, and refuses a run with none only as the fit
    starts (a MisconfigurationException traceback): refused here, naming it."""
    if not any(spec is not None for spec in (cfg.get("logger") or {}).values()):
        for key, _ in _callbacks_of(cfg, LearningRateMonitor):
            raise BriskError(
                f"{key}: the learning-rate monitor writes to a logger, and every logger.* is null. Keep one "
                f"(logger=csv), or leave the monitor out ({key}=null).",
                key,
            )


def check_validation_split(cfg: DictConfig, datamodule: L.LightningDataModule) -> None:
    """Once the data is loaded: an early stopping on a val/ metric needs a validation split that holds images
    (data.val_size=0 holds none), or Lightning raises after the first epoch."""
    if len(datamodule.val_dataloader()):
        return
    for key, spec in _callbacks_of(cfg, EarlyStopping):
        if str(spec.get("monitor")).startswith("val/"):
            size = OmegaConf.select(cfg, "data.val_size")
            _without_validation(key, spec.monitor, f"data.val_size={size} holds out none", "data.val_size=5000")


def _without_validation(key: str, monitor: str, why: str, fix: str) -> NoReturn:
    raise BriskError(
        f"{key}: early stopping on {monitor} needs validation, which {why}. Validate ({fix}), or stop on a train/ "
        f"metric ({key}.monitor=train/loss {key}.mode=min), or leave out early stopping.",
        key,
    )


# conf/train.yaml's always_on: the callbacks brisk-train adds whatever the callbacks group says, each the part of a
# promise that names it. The list is there to be seen; leaving one out breaks its promise, so it is refused.
PROMISES = {
    "speed_meter": "summary.json's figures",
    "startup_clock": "summary.json's figures",
    "resume_state": "exact resume",
    "rank_seed": "exact resume",
    "divergence_guard": "the stop on a NaN loss",
    "sigterm_checkpoint": "a checkpoint on SIGTERM",
}


def check_always_on(names: list[str] | None) -> None:
    """Refuse, in one line that names the promise, an always_on list that leaves one out (null: all out)."""
    names = list(names or [])
    if unknown := [n for n in names if n not in PROMISES]:
        raise BriskError(
            f"always_on: {unknown[0]} is not one of brisk's always-on callbacks ({', '.join(PROMISES)}); a callback "
            "of your own goes in the callbacks group (docs/extending.md: Add a callback)."
        )
    for name, promise in PROMISES.items():
        if name not in names:
            parts = " and ".join(n for n, p in PROMISES.items() if p == promise)
            raise BriskError(f"always_on: {promise} depends on {parts}; put {name} back in always_on.")


def always_on(target_acc: float | None = None) -> list[L.Callback]:
    """Whatever the callbacks group says: the measurements in summary.json (find them in trainer.callbacks),
    exact resume, each rank's own augmentation draws, NaN stop, checkpoint on SIGTERM; with `target_acc`, the
    time-to-accuracy clock. They are PROMISES' names, listed in conf/train.yaml (checks.validate reads it)."""
    # Imported by the commands that fit or test (not brisk-export, which builds only the data and the model)
    from brisk.callbacks import DivergenceGuard, RankSeed, ResumeState, SigtermCheckpoint, SpeedMeter, StartupClock

    clock = []
    if target_acc is not None:  # its module is loaded only by the runs that race a target
        from brisk.callbacks.time_to_accuracy import TimeToAccuracy

        clock = [TimeToAccuracy(target_acc)]
    return [
        *clock,
        SpeedMeter(),
        StartupClock(),
        ResumeState(),
        RankSeed(),
        DivergenceGuard(),
        SigtermCheckpoint(),
    ]
