"""Which checkpoint is which in a run directory, and which weights a run is tested with.

A run's checkpoints are in <run>/checkpoints/: last.ckpt (last-v1.ckpt and so on where Lightning keeps an older
one beside it), the best by val/acc, final.ckpt. A SLURM job's requeue checkpoints are <run>/hpc_ckpt_N.ckpt.
`ckpt_path=last` and `ckpt_path=hpc` are Lightning's names for the newest of each.

The weights a run is tested with are the best checkpoint by val/acc, or the weights fit ends with. Some levers
produce their result as fit ends, not in the best-by-val/acc checkpoint: SWA moves its average into the model only
when training ends (lightning 2.6.6; for a net with BatchNorm after one extra epoch that recomputes the statistics),
and pruning reaches its target sparsity in the last epochs, while an earlier, denser epoch may have the best
val/acc. For those, brisk writes final.ckpt after fit and tests that, so summary.json, brisk-eval and brisk-export
all see the averaged or pruned net.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelPruning, StochasticWeightAveraging

ENDS_WITH_NEW_WEIGHTS = (StochasticWeightAveraging, ModelPruning)
KEYWORDS = ("last", "hpc")  # ckpt_path values Lightning resolves itself
FOLDER = "checkpoints"
HPC = "hpc_ckpt_"


def last(run_dir: str | Path) -> Path:
    """Where the unmonitored checkpoint of a run in `run_dir` writes its last.ckpt."""
    return Path(run_dir) / FOLDER / "last.ckpt"


def lasts(folder: Path) -> list[Path]:
    """The last checkpoints in a checkpoint folder: last.ckpt and the last-vN.ckpt Lightning keeps beside it.
    Whatever the name is (a FIFO too), as Lightning finds them: the file brisk checks is the one Lightning opens, and
    brisk.checkpoints.io refuses one that is not a regular file."""
    return sorted(p for p in folder.glob("last*.ckpt") if not p.is_dir())


def hpcs(run_dir: Path) -> list[Path]:
    """A SLURM job's requeue checkpoints in its run directory (whatever they are, as `lasts`)."""
    return sorted(p for p in run_dir.glob(f"{HPC}*.ckpt") if not p.is_dir())


def is_hpc(path: Path) -> bool:
    return path.name.startswith(HPC)


def run_dir_of(ckpt_path: str | Path) -> Path:
    """The run directory of a checkpoint: <run>/checkpoints/x.ckpt, or <run>/hpc_ckpt_N.ckpt (SLURM)."""
    ckpt = Path(ckpt_path).absolute()
    return ckpt.parent.parent if ckpt.parent.name == FOLDER else ckpt.parent


def resolve(ckpt_path: str | None, run_dir: Path) -> Path | None:
    """The file a ckpt_path resolves to: `last` and `hpc` as Lightning resolves them (the newest), in brisk's
    layout; None when there is none."""
    if ckpt_path is None:
        return None
    if str(ckpt_path) in KEYWORDS:
        found = lasts(run_dir / FOLDER) if ckpt_path == "last" else hpcs(run_dir)
        return max(found, key=lambda p: p.lstat().st_mtime_ns) if found else None
    return Path(ckpt_path)


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
