"""summary.json: what a script needs from a finished run, without parsing logs."""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from omegaconf import DictConfig

from brisk.callbacks.model_summary import ModelSummary
from brisk.callbacks.speed_meter import SpeedMeter
from brisk.callbacks.startup_clock import StartupClock
from brisk.models import metrics as model_metrics
from brisk.models.sparsity import sparsity
from brisk.run.rundir import Job
from brisk.utils.files import write_text


def hardware() -> dict[str, Any]:
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "torch": torch.__version__,
        "lightning": L.__version__,
        "python": platform.python_version(),
    }


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in sorted(metrics.items()) if getattr(v, "numel", lambda: 1)() == 1}


def strict(value: Any) -> Any:
    """NaN and +-Inf become None (null): JSON has no such numbers, and strict readers refuse Python's `NaN`."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def cost(trainer: L.Trainer, model: L.LightningModule, datamodule: L.LightningDataModule) -> dict[str, int | None]:
    """`params` and `flops_per_image`: the count the ModelSummary made at setup, or, in a run without the summary
    table (trainer.enable_model_summary=false), counted now from the trained net: once a run either way."""
    counted = next((c.cost for c in trainer.callbacks if isinstance(c, ModelSummary) and c.cost is not None), None)
    return counted or model_metrics.cost(model.net, datamodule.image_size)


def write(path: Path, summary: dict[str, Any]) -> None:
    """Write strict JSON atomically: a reader never sees half a file, nor a bare NaN."""
    write_text(path, json.dumps(strict(summary), indent=2, sort_keys=True, allow_nan=False) + "\n")


def of_training(
    cfg: DictConfig,
    job: Job,
    trainer: L.Trainer,
    datamodule: L.LightningDataModule,
    model: L.LightningModule,
    metrics: dict[str, float],
    fit_seconds: float,
    tested: str,
    last: str,
) -> dict[str, Any]:
    """summary.json of a brisk-train run: its metrics (fit's and test's), speed, shape and where its checkpoints are.
    `job`: its directory and overrides; `tested` is the checkpoint the test loaded, `last` the run's last checkpoint."""
    speed, startup = (next(c for c in trainer.callbacks if isinstance(c, kind)) for kind in (SpeedMeter, StartupClock))
    clock = None
    if cfg.get("target_acc") is not None:  # the clock is there (always_on) and its module loaded only then
        from brisk.callbacks.time_to_accuracy import TimeToAccuracy

        clock = next((c.report() for c in trainer.callbacks if isinstance(c, TimeToAccuracy)), None)
    return {
        "run_dir": str(job.dir),
        "metrics": metrics,
        "images_per_sec": speed.images_per_sec,
        "fit_seconds": fit_seconds,
        "startup_seconds": startup.seconds,  # process start to the first training step
        "time_to_accuracy": clock,  # with target_acc (brisk.callbacks.time_to_accuracy says what it counts)
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "precision": {"requested": str(cfg.trainer.precision), "effective": trainer.precision},
        "world_size": trainer.world_size,
        "global_batch": cfg.data.batch_size,
        "per_device_batch": cfg.data.batch_size // trainer.world_size,
        "accumulation": trainer.accumulate_grad_batches,
        "effective_batch": cfg.data.batch_size * trainer.accumulate_grad_batches,
        "ckpt_path": tested,
        "last_ckpt_path": last,
        "seed": cfg.seed,
        "class_names": datamodule.class_names,
        "normalization": {"mean": datamodule.mean, "std": datamodule.std},
        "sparsity": sparsity(model),  # of the tested weights: per conv/linear weight and in total
        **cost(trainer, model, datamodule),  # params, flops_per_image
        **model.test_report,  # test_per_class, test_confusion_matrix: absent without a test split
        "overrides": list(job.overrides),
        "hardware": hardware(),
        "distributed": environment(trainer),
    }


def environment(trainer: L.Trainer) -> dict[str, object]:
    """Which launcher started the ranks, for summary.json."""
    env = getattr(trainer.strategy, "cluster_environment", None)  # single-device strategies have none
    if env is None:
        env = next((c for c in (SLURMEnvironment, TorchElasticEnvironment) if c.detect()), None)
    name = (env.__name__ if isinstance(env, type) else type(env).__name__) if env is not None else None
    return {
        "cluster_environment": name,
        "num_nodes": trainer.num_nodes,
        "devices_per_node": trainer.num_devices,
        "node_rank": trainer.node_rank,
    }
