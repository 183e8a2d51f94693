"""brisk-train: fit, test the best checkpoint, write summary.json, print the run directory.

Read top to bottom, it is the whole run: each step below is one call, and each check runs once."""

from __future__ import annotations

import sys
import time

import lightning as L
from omegaconf import DictConfig

from brisk.callbacks.run_start import RunStart
from brisk.checkpoints.paths import checkpoint_to_test
from brisk.cli import entry_point
from brisk.run import checks, devices, loggers, precision, preflight, resume, rundir
from brisk.run import summary as run_summary
from brisk.run.builder import always_on, build_datamodule, build_model, check_validation_split, make_trainer
from brisk.utils.ranks import first_process


def train(cfg: DictConfig, run: rundir.Run) -> float | None:
    checks.validate(cfg)  # what only this machine can say; before seeding too: seed_everything refuses a bad seed
    run_dir = run.job.dir
    resumed = resume.resolve(cfg, run_dir, run.job.multirun)  # a resume is first compared with its run's config
    if resumed.finished:
        run.leave_as_is()
        if first_process():
            print(resumed.finished_line(), file=sys.stderr, flush=True)
            print(resumed.run_dir, flush=True)  # the last line, as for every run
        return None
    L.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg)
    # The run's only build of the net, before any data is read: it needs only the class names, and what the model
    # refuses (an optimizer's weight_decay) is refused in a second, not after the data.
    model = build_model(cfg, datamodule)
    if first_process():  # one process checks the folders and prepares the data; the job's other ranks share them
        preflight.folders(cfg)  # before anything is written
        preflight.room(cfg, model)  # one checkpoint of this model fits in each checkpoint folder
        datamodule.prepare_data()  # download, generate or cache (Lightning's contract: one process)
    if (n := devices.ranks_to_start(cfg)) > 1:  # DDP: more than one process on this node
        from brisk.run import elastic  # the launcher: imported by the runs that start ranks only

        return elastic.run(cfg, run, n)  # TorchElastic starts n ranks that each run train(); this process trains none
    if first_process():
        # Loading: the splits are read here, once, and kept for the fit and the test; a damaged test split is found
        # now, not after the whole fit. The other ranks of a torchrun or SLURM job load in fit's setup, after the
        # barrier that follows Lightning's prepare_data: here they would race rank 0's download (seen under SLURM).
        datamodule.setup("fit")
        datamodule.setup("test")
        check_validation_split(cfg, datamodule)  # what the loaded splits refuse: early stopping with no val split
    target = cfg.get("target_acc")
    # The run starts at its first optimizer step, when RunStart writes its record: what the fit refuses before that
    # leaves no run directory (brisk.run.rundir). Last, so it marks the step after every other callback's batch end.
    started = RunStart(record.write if (record := run.record(cfg)) else None)
    trainer = make_trainer(cfg, [*always_on(target), started])
    precision.report(cfg.trainer.precision, str(cfg.trainer.accelerator), trainer)

    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule, ckpt_path=resumed.ckpt_path, weights_only=True)
    fit_seconds = time.perf_counter() - start
    fit_metrics = dict(trainer.callback_metrics)

    # Read before testing: test(ckpt_path=best) loads the callbacks' states saved in the best checkpoint, which
    # for a best epoch 0 predate last.ckpt.
    last = next((c.last_model_path or c.best_model_path for c in trainer.checkpoint_callbacks if c.monitor is None), "")
    tested = checkpoint_to_test(trainer)  # the best by val/acc, or final.ckpt after SWA or pruning
    trainer.test(model, datamodule=datamodule, ckpt_path=tested or None, weights_only=True)
    metrics = run_summary.scalars({**fit_metrics, **trainer.callback_metrics})

    if trainer.is_global_zero:
        summary = run_summary.of_training(cfg, run.job, trainer, datamodule, model, metrics, fit_seconds, tested, last)
        run_summary.write(run_dir / "summary.json", summary)
        loggers.finish(trainer)  # wandb prints its closing lines now, before the run directory
        print(run_dir, flush=True)  # the last line: scripts read the run directory from here
    return metrics.get(cfg.optimized_metric) if cfg.get("optimized_metric") else None


@entry_point("train")
def main(cfg: DictConfig, run: rundir.Run) -> float | None:
    if cfg.get("tune"):  # tune=lr|batch_size: Lightning's finders instead of training
        from brisk.run.tune import tune

        return tune(cfg)
    if cfg.get("show"):  # +show=augment: a grid of training images before and after augmentation
        from brisk.run.show import show

        show(cfg)
        return None
    return train(cfg, run)


if __name__ == "__main__":
    main()
