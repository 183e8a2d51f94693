"""brisk-train: fit, test the best checkpoint, write summary.json, print the run directory."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from brisk import checks, distributed, resume_check, rundir
from brisk import summary as run_summary
from brisk.builder import build, resolve_precision
from brisk.callbacks import SpeedMeter, StartupClock
from brisk.callbacks.final import checkpoint_to_test
from brisk.cli import entry_point
from brisk.models.sparsity import sparsity

log = logging.getLogger("brisk")


def train(cfg: DictConfig) -> float | None:
    checks.validate(cfg)  # before seeding too: seed_everything raises on a seed out of range
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    ckpt_path = distributed.slurm_resume_path(cfg.get("ckpt_path"), run_dir)
    if resume_check.nothing_to_do(cfg, ckpt_path, run_dir):  # a resume is first compared with its run's config
        rundir.leave_as_is()
        return None
    L.seed_everything(cfg.seed, workers=True)
    trainer, datamodule, model = build(cfg)
    requested = str(cfg.trainer.precision)
    if checks.precision_name(resolve_precision(requested, str(cfg.trainer.accelerator))) != trainer.precision:
        # e.g. 16-mixed on CPU, which Lightning runs as bf16-mixed with only a warning
        log.warning("precision=%s is not available here: running as %s", requested, trainer.precision)
    else:
        log.info("precision: %s (requested %s)", trainer.precision, requested)

    rundir.start(cfg)  # every check has passed: from here on the run directory is kept, with its record
    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    fit_seconds = time.perf_counter() - start
    fit_metrics = dict(trainer.callback_metrics)

    # Read before testing: test(ckpt_path=best) loads the callbacks' states saved in the best checkpoint, which
    # for a best epoch 0 predate last.ckpt (summary.json said "" for every 1-epoch run).
    last = next((c.last_model_path or c.best_model_path for c in trainer.checkpoint_callbacks if c.monitor is None), "")
    best = checkpoint_to_test(trainer)  # the best by val/acc, or final.ckpt after SWA or pruning
    trainer.test(model, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
    metrics = run_summary.scalars({**fit_metrics, **trainer.callback_metrics})

    per_device = cfg.data.batch_size // trainer.world_size
    speed, startup = (next(c for c in trainer.callbacks if isinstance(c, kind)) for kind in (SpeedMeter, StartupClock))
    if trainer.is_global_zero:
        run_summary.write(
            run_dir / "summary.json",
            {
                "run_dir": str(run_dir),
                "metrics": metrics,
                "images_per_sec": speed.images_per_sec,
                "fit_seconds": fit_seconds,
                "startup_seconds": startup.seconds,  # process start to the first training step
                "epochs": trainer.current_epoch,
                "global_step": trainer.global_step,
                "precision": {"requested": requested, "effective": trainer.precision},
                "world_size": trainer.world_size,
                "global_batch": cfg.data.batch_size,
                "per_device_batch": per_device,
                "accumulation": trainer.accumulate_grad_batches,
                "effective_batch": cfg.data.batch_size * trainer.accumulate_grad_batches,
                "ckpt_path": best,
                "last_ckpt_path": last,
                "seed": cfg.seed,
                "class_names": datamodule.class_names,
                "normalization": {"mean": datamodule.mean, "std": datamodule.std},
                "sparsity": sparsity(model),  # of the tested weights: per conv/linear weight and in total
                "overrides": list(HydraConfig.get().overrides.task),
                "hardware": run_summary.hardware(),
                "distributed": distributed.environment(trainer),
            },
        )
        print(run_dir, flush=True)  # the last line: scripts read the run directory from here
    value = metrics.get(cfg.optimized_metric) if cfg.get("optimized_metric") else None
    return value


@entry_point("train")
def main(cfg: DictConfig) -> float | None:
    if cfg.get("tune"):  # tune=lr|batch_size: Lightning's finders instead of training
        from brisk.search.tune import tune

        return tune(cfg)
    return train(cfg)


if __name__ == "__main__":
    main()
