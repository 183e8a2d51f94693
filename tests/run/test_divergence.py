"""A NaN or Inf loss stops the run, names the step and the last good checkpoint, and never reaches a checkpoint;
the check costs no host sync on the steps where Lightning logs nothing."""

from __future__ import annotations

import re
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.overrides import TorchFunctionMode

from brisk.callbacks import DivergenceGuard
from brisk.callbacks.divergence_guard import Diverged
from helpers import TINY, assert_user_error, bare_trainer, brisk_train

# Learning rate x e^40 from epoch 2 on: epochs 0 and 1 train normally, epoch 2 blows up (8 steps per epoch).
EXPLODE = [
    *TINY,
    "data.synthetic.n_train=1200",
    "data.val_size=400",
    "trainer.max_epochs=4",
    "callbacks.progress_bar=null",
    "scheduler=exp_decay",
    "scheduler.constant_epochs=2",  # Keras: epochs 0 and 1 at the base lr, x e^40 from epoch 2
    "scheduler.k=-40",
]


def _finite(ckpt: Path) -> tuple[int, bool]:
    c = torch.load(ckpt, weights_only=True)
    return c["global_step"], all(torch.isfinite(v).all() for v in c["state_dict"].values() if v.is_floating_point())


@pytest.mark.parametrize("every_step", [False, True], ids=["epoch-checkpoints", "step-checkpoints"])
def test_nan_stops_the_run_and_spares_the_checkpoints(every_step, brisk_root, tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"
    # With a checkpoint after every step, the first write after the blow-up would hold NaN weights.
    extra = ["callbacks.last_checkpoint.every_n_train_steps=1"] if every_step else []
    proc = brisk_train([*EXPLODE, *extra, f"hydra.run.dir={run_dir}"], brisk_root, capsys, monkeypatch)
    last = run_dir / "checkpoints" / "last.ckpt"
    line = assert_user_error(proc, "training diverged", f"The last good checkpoint is {last}", "optimizer.lr")
    step = int(re.search(r"global step (\d+)", line).group(1))
    assert step > 16, "it stopped before the learning rate went up"
    saved_step, finite = _finite(last)
    assert finite and saved_step < step
    assert all(_finite(p)[1] for p in run_dir.glob("checkpoints/*.ckpt"))
    assert not (run_dir / "summary.json").exists()


class HostSyncs(TorchFunctionMode):
    """Records the tensor methods that copy a value to the host, i.e. wait for the device."""

    SYNCS = {"item", "__bool__", "__float__", "__int__", "tolist", "nonzero", "__index__"}

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.SYNCS:
            self.calls.append(func.__name__)
        return func(*args, **(kwargs or {}))


class Losses(L.LightningModule):
    """A model whose training loss at batch i is losses[i] (its gradients are zero: the weights stay finite)."""

    def __init__(self, losses: list[float]) -> None:
        super().__init__()
        self.losses, self.w = losses, torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx: int):
        return self.w.sum() * 0 + self.losses[batch_idx]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(len(self.losses), 1), batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class WatchedGuard(DivergenceGuard):
    """The guard, with the host syncs of its per-batch hook recorded by batch."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: dict[int, list[str]] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        with HostSyncs() as syncs:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self.syncs[batch_idx] = syncs.calls


def _fit(losses: list[float], guard: DivergenceGuard, **trainer_args) -> None:
    bare_trainer(max_epochs=1, log_every_n_steps=5, callbacks=[guard], **trainer_args).fit(Losses(losses))


@pytest.mark.parametrize("accumulate", [1, 2])
def test_host_sync_only_when_lightning_logs(accumulate):
    """One read of the summed losses on the batch after which Lightning writes its logs (under accumulation,
    the batch that steps the optimizer), none on the others."""
    guard = WatchedGuard()
    _fit([2.3] * 24, guard, accumulate_grad_batches=accumulate)
    every = 5 * accumulate  # log_every_n_steps counts optimizer steps
    assert {b for b, calls in guard.syncs.items() if calls} == {b for b in range(24) if (b + 1) % every == 0}
    assert all(calls == ["__float__"] for calls in guard.syncs.values() if calls)


def test_inf_between_log_steps_is_caught_at_the_next_one():
    losses = [2.3, 2.2, float("inf"), 2.1, 2.0, 1.9, 1.8]
    with pytest.raises(Diverged, match=r"the loss became inf in epoch 0, batches 0 to 4, by global step 5\."):
        _fit(losses, WatchedGuard())
