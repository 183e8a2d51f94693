"""Which weights a run is tested with: the best checkpoint by val/acc, or the weights fit ends with.

Some levers produce their result as fit ends, not in the best-by-val/acc checkpoint: SWA moves its
average into the model only when training ends (lightning 2.6.6; for a net with BatchNorm after one
extra epoch that recomputes the statistics), and pruning reaches its target sparsity in the last epochs,
while an earlier, denser epoch may have the best val/acc. For those, brisk writes final.ckpt after fit and
tests that, so summary.json, brisk-eval and brisk-export all see the averaged or pruned net.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelPruning, StochasticWeightAveraging

ENDS_WITH_NEW_WEIGHTS = (StochasticWeightAveraging, ModelPruning)


def checkpoint_to_test(trainer: L.Trainer) -> str:
    """The path trainer.test should load after fit ("" for the weights in memory). Call it on every rank."""
    checkpoint = trainer.checkpoint_callback
    if any(isinstance(c, ENDS_WITH_NEW_WEIGHTS) for c in trainer.callbacks):
        folder = Path(checkpoint.dirpath) if checkpoint is not None else Path(trainer.default_root_dir)
        path = str(folder / "final.ckpt")
        trainer.save_checkpoint(
            path, weights_only=False
        )  # on every rank: building a checkpoint gathers each rank's RNG state
        return path
    return checkpoint.best_model_path if checkpoint is not None else ""
