"""brisk-eval ckpt_path=<path>: test a checkpoint on the data its run used, write eval.json."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from brisk.checkpoints import restore
from brisk.cli import entry_point
from brisk.run import checks, loggers
from brisk.run import summary as run_summary
from brisk.run.builder import build_datamodule
from brisk.run.prepare import build_trainer


def evaluate(cfg: DictConfig, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, float]:
    """`overrides`: the command line's, which win over the run's saved config."""
    ckpt = Path(cfg.ckpt_path)
    checks.values(cfg)  # seed and trainer.* by brisk-train's rules, before anything is read
    L.seed_everything(cfg.seed, workers=True)
    # What the run trained on (its .hydra/config.yaml), before the config checks see the data section.
    cfg = restore.with_run_config(cfg, ckpt, overrides)
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
def main(cfg: DictConfig) -> None:
    evaluate(cfg, HydraConfig.get().overrides.task)


if __name__ == "__main__":
    main()
