"""brisk-train: fit, test the best checkpoint, write summary.json, print the run directory.

Read top to bottom, it is the whole run: each step below is one call, and each check runs once."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from brisk.checkpoints.paths import checkpoint_to_test
from brisk.cli import entry_point
from brisk.run import checks, launch, preflight, resume, rundir
from brisk.run import summary as run_summary
from brisk.run.builder import always_on, build_datamodule, build_model, make_trainer, resolve_precision
from brisk.utils.ranks import first_process

log = logging.getLogger("brisk")


def train(cfg: DictConfig, run: rundir.Run) -> float | None:
    checks.validate(cfg)  # before seeding too: seed_everything raises on a seed out of range
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    ckpt_path = launch.slurm_resume_path(cfg.get("ckpt_path"), run_dir)
    if resume.nothing_to_do(cfg, ckpt_path, run_dir):  # a resume is first compared with its run's config
        run.leave_as_is()
        return None
    L.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg)
    if first_process():  # the other ranks of a job share what the first one checked
        preflight.check(cfg, datamodule)
    trainer = launch.on_all_ranks(lambda: make_trainer(cfg, always_on()))  # starts a DDP job's other ranks
    model = build_model(cfg, datamodule)
    _log_precision(str(cfg.trainer.precision), str(cfg.trainer.accelerator), trainer)

    run.start(cfg)  # every check has passed: from here on the run directory is kept, with its record
    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    fit_seconds = time.perf_counter() - start
    fit_metrics = dict(trainer.callback_metrics)

    # Read before testing: test(ckpt_path=best) loads the callbacks' states saved in the best checkpoint, which
    # for a best epoch 0 predate last.ckpt.
    last = next((c.last_model_path or c.best_model_path for c in trainer.checkpoint_callbacks if c.monitor is None), "")
    tested = checkpoint_to_test(trainer)  # the best by val/acc, or final.ckpt after SWA or pruning
    trainer.test(model, datamodule=datamodule, ckpt_path=tested or None, weights_only=True)
    metrics = run_summary.scalars({**fit_metrics, **trainer.callback_metrics})

    if trainer.is_global_zero:
        summary = run_summary.of_training(cfg, trainer, datamodule, model, metrics, fit_seconds, tested, last)
        run_summary.write(run_dir / "summary.json", summary)
        print(run_dir, flush=True)  # the last line: scripts read the run directory from here
    return metrics.get(cfg.optimized_metric) if cfg.get("optimized_metric") else None


def _log_precision(requested: str, accelerator: str, trainer: L.Trainer) -> None:
    if checks.precision_name(resolve_precision(requested, accelerator)) != trainer.precision:
        # e.g. 16-mixed on CPU, which Lightning runs as bf16-mixed with only a warning
        log.warning("precision=%s is not available here: running as %s", requested, trainer.precision)
    else:
        log.info("precision: %s (requested %s)", trainer.precision, requested)


@entry_point("train")
def main(cfg: DictConfig, run: rundir.Run) -> float | None:
    if cfg.get("tune"):  # tune=lr|batch_size: Lightning's finders instead of training
        from brisk.run.tune import tune

        return tune(cfg)
    return train(cfg, run)


if __name__ == "__main__":
    main()
