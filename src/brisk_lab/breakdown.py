"""Where brisk's cost per step goes: a fit at nil compute built up one component at a time.

Each row adds one component to the row above it, from a bare Lightning fit (the net, the loss and
the optimizer in a minimal LightningModule, no logger, bar or callbacks) to brisk-train's default
callbacks and logger (`bench.breakdown.callbacks`: the lab's other fits leave the checkpoint callbacks
out). Every row is timed against the plain loop in the same round, and the table gives each row's
extra milliseconds per step over that loop (median over interleaved rounds) and what the row
adds to the one above it. The compute is made negligible by the config (the lab's NilNet, a small
batch, no augmentation), so what is left is the framework's own Python per step.
"""

from __future__ import annotations

import copy
import tempfile

import lightning as L
import torch.nn.functional as F
from omegaconf import DictConfig, open_dict

from brisk import always_on, build_model, build_trainer
from brisk_lab.fit import DataCache, timed_fit, with_clock
from brisk_lab.plain import plain_loop
from brisk_lab.progress import progress
from brisk_lab.stats import in_turn, median, spread

CALL_STEPS = 50  # steps whose function calls are counted, after the warm-up

# (label, brisk's module instead of the bare one, always-on callbacks, callbacks of the group kept, logger, fast_loop)
ROWS = [
    ("bare Lightning", False, False, (), False, True),
    ("+ brisk's LightningModule (step loss, epoch metrics)", True, False, (), False, True),
    ("+ always-on callbacks (speed, resume state, divergence guard, SIGTERM)", True, True, (), False, True),
    ("+ progress bar", True, True, ("progress_bar",), False, True),
    (
        "+ checkpoint callbacks (best, last)",
        True,
        True,
        ("progress_bar", "model_checkpoint", "last_checkpoint"),
        False,
        True,
    ),
    ("+ LR monitor, run plots and CSV logger: the default", True, True, None, True, True),
    ("the default with fast_loop=false: plain Lightning (what brisk.fastloop buys)", True, True, None, True, False),
]


class BareStep(L.LightningModule):
    """Lightning's own cost: brisk's forward, loss and optimizer, and nothing else."""

    def __init__(self, model: L.LightningModule) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx: int):
        x, y = batch
        return F.cross_entropy(self.model(x), y, label_smoothing=self.model.hparams.label_smoothing)

    def configure_optimizers(self):
        return self.model.configure_optimizers()


def row_config(cfg: DictConfig, keep: tuple[str, ...] | None, logger: bool) -> DictConfig:
    """The config of one row: only the default callbacks it names (None: all of them), a logger or none."""
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        default = cfg.bench.breakdown.callbacks
        cfg.callbacks = {k: v for k, v in default.items() if keep is None or k in keep}
        cfg.trainer.enable_progress_bar = keep is None or "progress_bar" in keep
        cfg.trainer.enable_checkpointing = keep is None or "model_checkpoint" in keep
        if not logger:
            cfg.logger = {}
    return cfg


def measure_row(cfg: DictConfig, row: tuple, warmup: int, steps: int, data: DataCache, count_calls=False) -> dict:
    _, brisk_module, reliability, keep, logger, fast = row
    cfg = with_clock(row_config(cfg, keep, logger), warmup, steps, count_calls)
    with tempfile.TemporaryDirectory(prefix="brisk-breakdown-") as scratch, open_dict(cfg):
        cfg.paths.output_dir = scratch  # the checkpoints, logs and plots the fit writes when it stops
        cfg.fast_loop = fast
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        trainer = build_trainer(cfg, always_on() if reliability else [])
        model = build_model(cfg)
        datamodule = data.get(cfg)
        return timed_fit(trainer, datamodule, model if brisk_module else BareStep(model))


def compare(cfg: DictConfig, warmup: int, steps: int, rounds: int, data: DataCache) -> dict:
    plain, timed = [], {row[0]: [] for row in ROWS}
    plain_data = DataCache()  # the plain loop's own, read once (see overhead.compare)
    for r in range(rounds):
        progress(f"breakdown round {r + 1}/{rounds}")
        sides = [("plain", None), *((row[0], row) for row in ROWS)]
        for label, row in in_turn(sides, r):
            if row is None:
                plain.append(plain_loop(cfg, warmup, steps, data=plain_data)["batch_s"])
            else:
                timed[label].append(measure_row(cfg, row, warmup, steps, data)["batch_s"])
    # Function calls per step, which read the same on every run: the rounds' clocks scatter by more than
    # what one callback costs, the counts do not. One counted fit per side (counting slows it down).
    plain_calls = plain_loop(cfg, warmup, CALL_STEPS, count_calls=True, data=plain_data)["calls_per_step"]
    rows, previous, previous_calls = [], 0.0, 0.0  # each row against the one above (the last: the default)
    for row in ROWS:
        label = row[0]
        extra = [1e3 * (s - p) for s, p in zip(timed[label], plain, strict=True)]
        ms = median(extra)
        calls = measure_row(cfg, row, warmup, CALL_STEPS, data, count_calls=True)["calls_per_step"] - plain_calls
        rows.append(
            {
                "label": label,
                "extra_ms_per_step": ms,
                "adds_ms": ms - previous,
                "spread_ms": max(extra) - min(extra),
                "extra_calls_per_step": calls,
                "adds_calls": calls - previous_calls,
            }
        )
        previous, previous_calls = ms, calls
    return {
        "batch_size": cfg.data.batch_size,
        "steps": steps,
        "rounds": rounds,
        "plain_ms_per_step": 1e3 * median(plain),
        "plain_spread": spread(plain),
        "plain_calls_per_step": plain_calls,
        "call_steps": CALL_STEPS,
        "rows": rows,
        "default_extra_ms_per_step": rows[-2]["extra_ms_per_step"],
        # What brisk itself adds to Lightning's loop, by the count that does not scatter.
        "default_calls_over_bare_lightning": rows[-2]["extra_calls_per_step"] - rows[0]["extra_calls_per_step"],
    }
