"""ResumeState: what a checkpoint needs, beyond Lightning's, for a resumed run to repeat the original exactly.

1. Random number generators. Lightning checkpoints hold weights, optimizer, schedulers and loop
   progress, but no RNG state, so a resumed run would draw other augmentations. Every rank's
   generators are saved and restored.
2. The position in the epoch's sample order (TensorBatchLoader.state_dict, saved by Lightning).
   lightning 2.6.6 restores it only if the train loader is first built after the loop state is
   loaded. `trainer.estimated_stepping_batches` (OneCycle, cosine: configure_optimizers) builds it
   earlier, the restore is skipped, and the resumed epoch starts from its first batch again.
   This callback applies the position Lightning left pending, before the first batch is drawn.
"""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from brisk import compat


def collect() -> dict[str, Any]:
    """This process's generators, as tensors and plain containers: checkpoints load with weights_only=True,
    which refuses numpy arrays, so numpy's key array is stored as a tensor."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, py_state, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        # only once CUDA is in use: asking earlier would start a CUDA context in a CPU run on a GPU machine
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": [version, list(py_state), py_gauss],
    }


def restore(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, py_state, py_gauss = state["python"]
    random.setstate((version, tuple(py_state), py_gauss))


class ResumeState(L.Callback):
    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        # Lightning builds the checkpoint on every rank and rank 0 writes it, so rank 0 gathers all ranks.
        # All ranks call save_checkpoint together, so this collective never waits for a missing rank.
        mine = collect()
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            ranks: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(ranks, mine)
            return {"ranks": ranks}
        return {"ranks": [mine]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The loader has been iter()'d but has not drawn a batch: it reads its position at the first one.
        # A no-op when Lightning did apply it (the list is then empty) or when not resuming mid-epoch.
        compat.apply_pending_loader_state(trainer)
        # RNGs are restored here, not when loaded: building the model and the loaders draw numbers in
        # between. Nothing draws from here to the first training batch (the sanity check runs in isolate_rng).
        if self._pending is None:
            return
        ranks, self._pending = self._pending["ranks"], None
        if len(ranks) != trainer.world_size:
            rank_zero_warn(
                f"the checkpoint holds random states for {len(ranks)} processes, this run has {trainer.world_size}: "
                "they are not restored, so the resumed run will not repeat the original one exactly."
            )
            return
        restore(ranks[trainer.global_rank])
