"""What brisk does on each training step: no host reads between logging steps, a bar that still moves,
the step loss still reaching the logger."""

from __future__ import annotations

import csv

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from omegaconf import open_dict
from torch.overrides import TorchFunctionMode

from brisk import fastloop
from brisk.callbacks import ProgressBar
from brisk.callbacks.progress_bar import MeanSpeedColumn
from brisk.run.prepare import build
from helpers import TINY, bare_trainer, compose_cfg

# Tensor -> Python conversions: on a GPU each waits for the device (a host sync). Copies to the CPU
# (.cpu(), .to("cpu")) are no-ops in a CPU run, so only the GPU test sees those.
HOST_READS = {"item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"}


class HostReads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


class WatchSteps(L.Callback):
    """Records the host reads of everything Lightning runs from one batch's start to the next one's, for the
    steps on which nothing is logged and the progress bar is not redrawn."""

    def __init__(self, bar_every: int) -> None:
        self.bar_every, self.mode, self.reads = bar_every, None, {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._stop()
        quiet = not fastloop.logs_this_step(trainer) and (batch_idx + 1) % self.bar_every
        last = batch_idx + 1 >= trainer.num_training_batches
        if batch_idx >= 1 and quiet and not last:
            self.mode, self.batch = HostReads(), batch_idx
            self.mode.__enter__()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.reads[self.batch], self.mode = self.mode.seen, None


def test_quiet_steps_read_nothing_from_the_device(brisk_root):
    """A CPU run cannot see a sync, so this counts the calls that would be one on a GPU (tests/project/test_gpu.py
    checks the same with CUDA's sync debug mode)."""
    cfg = compose_cfg([*TINY, "trainer.max_epochs=1", "trainer.limit_val_batches=1"], brisk_root)
    watch = WatchSteps(bar_every=cfg.callbacks.progress_bar.refresh_rate)
    trainer, datamodule, model = build(cfg)
    trainer.callbacks.append(watch)
    trainer.fit(model, datamodule=datamodule)
    assert len(watch.reads) >= 5, "too few quiet steps watched: the test would prove nothing"
    assert {b: r for b, r in watch.reads.items() if r} == {}, "host reads on steps that log nothing"


def test_bar_moves_every_refresh_rate_steps_and_loss_reaches_the_logger_every_log_interval(brisk_root):
    cfg = compose_cfg([*TINY, "trainer.max_epochs=1", "trainer.limit_val_batches=1"], brisk_root)
    with open_dict(cfg):
        cfg.callbacks.progress_bar.refresh_rate = 4
    trainer, datamodule, model = build(cfg)
    bar = next(c for c in trainer.callbacks if isinstance(c, ProgressBar))
    seen, images = [], []

    class ReadBar(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(int(bar.progress.tasks[bar.train_progress_bar_id].completed))
            images.append(len(batch[1]))

    trainer.callbacks.append(ReadBar())
    trainer.fit(model, datamodule=datamodule)
    n = trainer.num_training_batches  # 15 with TINY
    assert seen == [min(n, (i + 1) // 4 * 4) if i + 1 < n else n for i in range(n)]
    # The training bar's speed: the epoch's images over the seconds until its bar finished, not batches a second.
    task = bar.progress.tasks[bar.train_progress_bar_id]
    speed = next(c for c in bar.progress.columns if isinstance(c, MeanSpeedColumn))
    assert speed.render(task).plain == f"{sum(images) / task.finished_time:,.0f} img/s"
    with open(f"{trainer.logger.log_dir}/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    logged = [int(r["step"]) for r in rows if r.get("train/loss_step")]
    every = cfg.trainer.log_every_n_steps
    assert logged == list(range(every - 1, n, every))
    epoch = [r for r in rows if r.get("train/acc")]
    assert len(epoch) == 1 and 0 < float(epoch[0]["train/acc"]) <= 1 and float(epoch[0]["train/loss"]) > 0


@pytest.mark.parametrize("precision", ["32", "bf16-true"])
def test_epoch_train_metrics_are_the_means_of_the_steps(precision, brisk_root):
    """The device-side sums give the epoch's mean step loss and its accuracy over every image trained on, also
    when the module's floating tensors are 16-bit (bf16-true): a bf16 sum of 15 losses would be off by ~1%."""
    base = [*TINY, "trainer.max_epochs=1", "trainer.limit_val_batches=0", "callbacks=none"]
    cfg = compose_cfg([*base, f"precision={precision}"], brisk_root)
    trainer, datamodule, model = build(cfg)
    losses, hits = [], []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            x, y = batch  # as the step sees it; BatchNorm in train mode normalizes by this batch, as the step does
            with torch.no_grad():
                hits.append(pl_module(x).argmax(-1) == y)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    trainer.callbacks.append(Record())
    trainer.fit(model, datamodule=datamodule)
    metrics = trainer.callback_metrics
    assert float(metrics["train/loss"]) == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    assert float(metrics["train/acc"]) == pytest.approx(float(torch.cat(hits).float().mean()), abs=1e-6)


def test_fast_callbacks_keep_only_what_resume_needs(brisk_root):
    cfg = compose_cfg([*TINY, "callbacks=fast"], brisk_root)
    assert set(cfg.callbacks) == {"last_checkpoint"} and cfg.trainer.enable_progress_bar is False
    trainer, _, _ = build(cfg)
    kinds = {type(c).__name__ for c in trainer.callbacks}
    assert {"LastCheckpoint", "DivergenceGuard", "ResumeState", "SigtermCheckpoint"} <= kinds
    assert not kinds & {"ProgressBar", "TQDMProgressBar", "RichProgressBar", "LearningRateMonitor", "RunPlots"}


def test_lightning_skips_a_hook_that_is_not_callable():
    """fastloop.skip_empty_hooks relies on Lightning's dispatch skipping such a hook, on callbacks and on the
    LightningModule (lightning 2.6.6)."""
    seen = []

    class Half(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(batch_idx)

    callback = Half()
    callback.on_train_batch_end = None  # called, it would raise TypeError
    trainer = bare_trainer(max_steps=3, callbacks=[callback])
    model = BoringModel()
    model.on_train_batch_end = model.on_before_backward = None
    trainer.fit(model)
    assert seen == [0, 1, 2]


def test_default_callbacks_leave_no_empty_batch_hook_to_call(brisk_root):
    """Lightning calls a callback's per-batch hook only where it does something, and none of the module's."""
    trainer, _, model = build(compose_cfg(TINY, brisk_root))
    assert not any(callable(getattr(model, h)) for h in fastloop.TRAINING_HOOKS)
    assert callable(model.on_validation_batch_end)  # Lightning reads the evaluation hooks' signatures
    for c in trainer.callbacks:
        c.setup(trainer, None, "fit")  # SigtermCheckpoint drops its per-batch agreement outside DDP here
    called = [(c, h) for c in trainer.callbacks for h in fastloop.BATCH_HOOKS if callable(getattr(c, h))]
    assert all(getattr(type(c), h) is not getattr(L.Callback, h) for c, h in called)
    # Which callbacks act on steps is not pinned here: tests/project/test_bench.py holds the calls a step to a budget.
    assert called, "no per-batch hook left at all: the check above would prove nothing"


def test_a_checkpoint_without_step_triggers_is_left_out_of_every_step(brisk_root):
    """fastloop drops the per-step hook of a ModelCheckpoint the builder made without a step or time trigger (it only
    runs checks then); with one, or with fast_loop=false, the hook stays."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from brisk.callbacks import LastCheckpoint

    def hooks(overrides):
        trainer, _, _ = build(compose_cfg([*TINY, *overrides], brisk_root))
        kinds = (ModelCheckpoint, LastCheckpoint)
        return {type(c).__name__: callable(c.on_train_batch_end) for c in trainer.callbacks if isinstance(c, kinds)}

    assert hooks([]) == {"ModelCheckpoint": False, "LastCheckpoint": False}
    assert hooks(["callbacks.last_checkpoint.every_n_train_steps=5"]) == {
        "ModelCheckpoint": False,
        "LastCheckpoint": True,
    }
    assert hooks(["fast_loop=false"]) == {"ModelCheckpoint": True, "LastCheckpoint": True}


ONE_EPOCH_OF_3 = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=1",
    "trainer.log_every_n_steps=1",
]


def test_lightnings_hook_name_is_set_without_module_setattr(brisk_root, monkeypatch):
    """Lightning sets the module's `_current_fx_name` around every hook it calls; under the fast loop the classifier
    stores it without nn.Module.__setattr__'s lookups (fastloop.FastModule), and self.log, which reads it, works."""
    trainer, datamodule, model = build(compose_cfg([*TINY, *ONE_EPOCH_OF_3], brisk_root))
    through_module = []
    module_setattr = torch.nn.Module.__setattr__

    def spy(self, name, value):
        if self is model:
            through_module.append(name)
        module_setattr(self, name, value)

    monkeypatch.setattr(torch.nn.Module, "__setattr__", spy)
    trainer.fit(model, datamodule)
    assert fastloop.HOOK_NAME not in through_module
    assert model._current_fx_name is None and "train/loss_step" in trainer.logged_metrics


def test_the_trainer_profiles_nothing_unless_a_profiler_is_named(brisk_root):
    """Lightning's default profiler enters a contextlib generator around every hook; brisk's NoProfiler hands back
    one null context. A profiler the config names is the one the Trainer gets."""
    from lightning.pytorch.profilers import SimpleProfiler

    from brisk.fastloop import NoProfiler

    trainer, _, _ = build(compose_cfg(TINY, brisk_root))
    assert type(trainer.profiler) is NoProfiler
    assert trainer.profiler.profile("[Callback]a.on_train_batch_end") is trainer.profiler.profile("b")
    named, _, _ = build(compose_cfg([*TINY, "debug=profiler"], brisk_root))
    assert type(named.profiler) is SimpleProfiler
