"""brisk-eval ckpt_path=<path>: test a checkpoint on the test split, write eval.json."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from brisk import summary as run_summary
from brisk.builder import build_datamodule, build_trainer
from brisk.checkpoint_io import readable
from brisk.cli import entry_point
from brisk.models import ImageClassifier


def evaluate(cfg: DictConfig) -> dict[str, float]:
    ckpt = Path(cfg.ckpt_path)
    L.seed_everything(cfg.seed, workers=True)
    trainer = build_trainer(cfg)  # first: it checks the config, ckpt_path included
    # weights_only=True: a crafted checkpoint cannot run code; brisk's hparams are plain containers.
    with readable(ckpt):
        model = ImageClassifier.load_from_checkpoint(ckpt, map_location="cpu", weights_only=True)
    trainer.test(model, datamodule=build_datamodule(cfg))
    metrics = run_summary.scalars(trainer.callback_metrics)
    if trainer.is_global_zero:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        run_summary.write(run_dir / "eval.json", {"ckpt_path": str(ckpt), "metrics": metrics, "run_dir": str(run_dir)})
        print(run_dir, flush=True)
    return metrics


@entry_point("eval")
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    main()
