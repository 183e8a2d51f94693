"""The same work as a brisk fit, as a bare PyTorch loop: the yardstick for framework overhead.

Same model (built by brisk's builder from the same seed, called as a module), same batches (a DataModule
from the same config: its loader and on-device augmentation), same optimizer (the LightningModule's own
configure_optimizers), same loss, in the order Lightning runs them: forward, zero_grad, backward, step.
Nothing else: no logging, no metrics, no callbacks, no progress bar."""

from __future__ import annotations

import contextlib
import itertools

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from brisk import BriskError, build_datamodule, build_model, resolve_precision
from brisk_lab.clock import Window
from brisk_lab.memory import PeakMemory


def device_of(cfg: DictConfig) -> torch.device:
    accelerator = str(cfg.trainer.accelerator)
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _autocast(precision: str, device: torch.device):
    """Lightning's mixed precision, written out: autocast, plus a gradient scaler for float16."""
    if precision in ("32", "32-true"):
        return contextlib.nullcontext, None
    if precision == "bf16-mixed" or (precision == "16-mixed" and device.type == "cpu"):  # as Lightning does on CPU
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16), None
    if precision == "16-mixed":
        return lambda: torch.autocast(device.type, dtype=torch.float16), torch.amp.GradScaler(device.type)
    raise BriskError(
        f"trainer.precision={precision}: the plain loop of the overhead comparison covers 32, bf16-mixed and "
        "16-mixed. Use one of those for bench.run=[overhead]."
    )


def plain_loop(cfg: DictConfig, warmup: int, steps: int, count_calls: bool = False) -> dict:
    if cfg.get("scheduler"):
        raise BriskError(
            "scheduler: the plain loop steps the optimizer only. Run the overhead part with scheduler=none."
        )
    if int(cfg.trainer.get("accumulate_grad_batches", 1)) != 1:
        raise BriskError(
            "trainer.accumulate_grad_batches: the overhead part compares single steps. Use accumulation=1."
        )
    device = device_of(cfg)
    autocast, scaler = _autocast(resolve_precision(cfg.trainer.precision, str(cfg.trainer.accelerator)), device)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    # Its own DataModule, never one a fit has used (that one would follow its Trainer's epoch and rank).
    datamodule = build_datamodule(cfg)
    model = build_model(cfg, datamodule)
    datamodule.prepare_data()
    datamodule.setup("fit")
    channels_last = datamodule.hparams.channels_last
    model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    model.train()
    optimizer = model.configure_optimizers()
    smoothing = model.hparams.label_smoothing

    memory = PeakMemory(device)  # as the StepClock does for the fit: both sides start from the same clean heap
    memory.reset()
    window = Window(warmup, steps, device, count_calls)
    window.start()
    loss = torch.tensor(float("nan"))
    for epoch in itertools.count():
        loader = datamodule.train_dataloader()
        loader.epoch_fn = lambda epoch=epoch: epoch  # each epoch its own order, as in a fit
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            x = datamodule.prepare_batch(x, train=True)
            with autocast():
                loss = F.cross_entropy(model(x), y, label_smoothing=smoothing)
            optimizer.zero_grad()
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            if window.tick(len(y)):
                return {**window.result(), "loss": float(loss.detach()), **memory.read(), "memory": memory.kind}
