"""The same work as a brisk fit, as a bare PyTorch loop: the yardstick for framework overhead.

Same model (built by brisk's builder from the same seed, called as a module, initialised from the data as a
fit does: AirbenchNet's whitening), same batches (a DataModule from the same config: its loader, its alternating
flips and on-device augmentation), same optimizer and schedule (the LightningModule's own, from this loop's counts),
same loss, in the order Lightning runs them: forward, zero_grad, backward, step, then Lookahead's pull
(`callbacks.lookahead`: it changes the weights, so it is part of the work) and a per-step schedule's step.
Nothing else: no logging, no metrics, no other callbacks, no progress bar."""

from __future__ import annotations

import contextlib
import itertools

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from brisk import CALLBACKS, BriskError, build_datamodule, build_model, resolve_precision, small_ops
from brisk_lab.clock import Window
from brisk_lab.fit import DataCache
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


def optimizers(model, cfg: DictConfig, steps_per_epoch: int):
    """The model's optimizer and schedule, sized as Lightning sizes them for this config (one device, no
    accumulation): (optimizer, scheduler or None, its interval, the fit's optimizer steps)."""
    epochs = int(cfg.trainer.max_epochs)
    max_steps = int(cfg.trainer.get("max_steps") or -1)
    total = epochs * steps_per_epoch if max_steps < 0 else min(max_steps, epochs * steps_per_epoch)
    made = model.optimizers_for(lambda: int(cfg.data.batch_size), lambda i: total if i == "step" else epochs)
    if not isinstance(made, dict):
        return made, None, None, total
    schedule = made["lr_scheduler"]
    return made["optimizer"], schedule["scheduler"], schedule["interval"], total


def plain_loop(
    cfg: DictConfig, warmup: int, steps: int, count_calls: bool = False, data: DataCache | None = None
) -> dict:
    if int(cfg.trainer.get("accumulate_grad_batches", 1)) != 1:
        raise BriskError(
            "trainer.accumulate_grad_batches: the overhead part compares single steps. Use accumulation=1."
        )
    device = device_of(cfg)
    autocast, scaler = _autocast(resolve_precision(cfg.trainer.precision, str(cfg.trainer.accelerator)), device)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    # Its own DataModule, never one a fit has used (that one would follow its Trainer's epoch and rank): `data`, if
    # given, is a cache that only plain loops draw from.
    datamodule = data.get(cfg) if data is not None else build_datamodule(cfg)
    model = build_model(cfg, datamodule)
    datamodule.prepare_data()
    datamodule.setup("fit")
    model.init_from_data(datamodule)  # on the CPU, before the move, as Lightning's setup hook runs it
    channels_last = datamodule.hparams.channels_last
    model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    model.train()
    optimizer, scheduler, interval, total = optimizers(model, cfg, len(datamodule.train_dataloader()))
    smoothing = model.hparams.label_smoothing
    spec = (cfg.get("callbacks") or {}).get("lookahead")
    lookahead = CALLBACKS.build(spec) if spec else None
    if lookahead is not None:
        lookahead.attach(model.net, total)

    memory = PeakMemory(device)  # as the StepClock does for the fit: both sides start from the same clean heap
    memory.reset()
    window = Window(warmup, steps, device, count_calls)
    window.start()
    loss = torch.tensor(float("nan"))
    step = 0
    for epoch in itertools.count():
        loader = datamodule.train_dataloader()
        loader.epoch_fn = lambda epoch=epoch: epoch  # each epoch its own order and flips, as in a fit
        for x, y, *flips in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with small_ops(device):  # brisk's thread setting for the augmentation, on both sides
                x = datamodule.prepare_batch(x, train=True, flips=flips[0].to(device) if flips else None)
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
            step += 1
            if lookahead is not None:
                lookahead.update(step)
            if interval == "step":
                scheduler.step()
            if window.tick(len(y)):
                return {**window.result(), "loss": float(loss.detach()), **memory.read(), "memory": memory.kind}
        if interval == "epoch":
            scheduler.step()
