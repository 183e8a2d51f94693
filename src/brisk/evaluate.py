"""brisk-eval ckpt_path=<path>: test a checkpoint on the data its run used, write eval.json."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from brisk.checkpoints import restore
from brisk.cli import entry_point
from brisk.run import checks, devices, elastic, loggers, rundir
from brisk.run import summary as run_summary
from brisk.run.builder import build_datamodule
from brisk.run.prepare import build_trainer
from brisk.utils import run_files


def evaluate(
    cfg: DictConfig, overrides: list[str] | tuple[str, ...] = (), run: rundir.Run | None = None
) -> dict[str, float]:
    """`overrides`: the command line's, which win over the run's saved config. `run`: the command's run directory,
    where TorchElastic's ranks run this command again (brisk.run.elastic); without it, no ranks start."""
    ckpt = Path(cfg.ckpt_path)
    checks.values(cfg)  # seed and trainer.* by brisk-train's rules, before anything is read
    L.seed_everything(cfg.seed, workers=True)
    # What the run trained on (its .hydra/config.yaml), before the config checks see the data section.
    given, cfg = cfg, restore.with_run_config(cfg, ckpt, overrides)
    if run is not None and (n := devices.ranks_to_start(cfg)) > 1:
        # each rank runs this command; rank 0 writes eval.json
        elastic.run(given, run, n)
        return run_files.load_json(run.dir / "eval.json")["metrics"]
    trainer = build_trainer(cfg)
    model = restore.load_model(cfg, ckpt)
    trainer.test(model, datamodule=build_datamodule(cfg))
    metrics = run_summary.scalars(trainer.callback_metrics)
    if trainer.is_global_zero:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        # test_per_class and test_confusion_matrix as in summary.json
        result = {"ckpt_path": str(ckpt), "metrics": metrics, "run_dir": str(run_dir), **model.test_report}
        run_summary.write(run_dir / "eval.json", result)
        loggers.finish(trainer)  # wandb's closing lines before the run directory, as in brisk-train
        print(run_dir, flush=True)
    return metrics


@entry_point("eval")
def main(cfg: DictConfig, run: rundir.Run) -> None:
    evaluate(cfg, HydraConfig.get().overrides.task, run)


if __name__ == "__main__":
    main()
