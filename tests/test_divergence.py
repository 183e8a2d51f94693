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
from brisk.callbacks.guard import Diverged
from conftest import TINY, run_cli
from test_bad_data import assert_user_error

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
def test_nan_stops_the_run_and_spares_the_checkpoints(every_step, brisk_root, tmp_path):
    run_dir = tmp_path / "run"
    # With a checkpoint after every step, the first write after the blow-up would hold NaN weights.
    extra = ["callbacks.last_checkpoint.every_n_train_steps=1"] if every_step else []
    proc = run_cli("train", [*EXPLODE, *extra, f"hydra.run.dir={run_dir}"], brisk_root, check=False)
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


def test_no_host_sync_between_log_steps():
    trainer = L.Trainer(accelerator="cpu", devices=1, log_every_n_steps=5, logger=False, enable_checkpointing=False)
    guard = DivergenceGuard()
    for batch_idx in range(1, 5):
        with HostSyncs() as syncs:
            guard.on_train_batch_end(trainer, None, {"loss": torch.tensor(2.3)}, None, batch_idx)
        assert syncs.calls == [], f"step {batch_idx}: {syncs.calls}"
    with HostSyncs() as syncs:  # the 5th step is a logging step: one look at the buffered losses
        guard.on_train_batch_end(trainer, None, {"loss": torch.tensor(2.3)}, None, 5)
    assert syncs.calls == ["__bool__"]


def test_inf_between_log_steps_is_caught_at_the_next_one():
    trainer = L.Trainer(accelerator="cpu", devices=1, log_every_n_steps=5, logger=False, enable_checkpointing=False)
    guard = DivergenceGuard()
    losses = [2.3, 2.2, float("inf"), 2.1]
    for batch_idx, loss in enumerate(losses):
        guard.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, batch_idx)
    with pytest.raises(Diverged, match=r"the loss is inf at global step 0 \(epoch 0, batch 2\)"):
        guard.on_train_batch_end(trainer, None, {"loss": torch.tensor(2.0)}, None, 4)
