"""The console of brisk's commands: the lines of Lightning, torch and mlflow known to be harmless here are dropped
in this one place, each with the reason. Every other warning and log line still prints.

`quiet()` is called when an entry point starts (brisk.cli.hydra_entry), also in each rank that brisk, Lightning's
ddp launcher or torchrun starts: importing brisk changes nothing. Warnings use Python's own filters
(`warnings.filterwarnings`), log lines a `logging` filter on the logger that writes them: Lightning's documented
ways to configure its console output, with no Lightning code patched.
"""

from __future__ import annotations

import logging
import warnings

# (the start of the message, a regular expression as `warnings.filterwarnings` takes it; the category)
WARNINGS = (
    # torch 2.14 deprecated the class LeafSpec, which Lightning 2.6.6's own pytree helper still builds: nothing a
    # user of brisk can change, and the helper works.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
    # precision=16-mixed on a CPU: brisk.run.precision.report says in its own line what the run got instead.
    (
        r"You passed `Trainer\(accelerator='cpu', precision='16-mixed'\)` but AMP with fp16 is not supported",
        UserWarning,
    ),
    # Under any mixed precision: only the model summary's size estimate in MB is off; training is not.
    (r"Precision \S+ is not supported by the model summary", UserWarning),
    # Lightning's advice for epoch-level values logged without sync_dist, for the two that are already the same on
    # every rank: val/acc_best is the MaxMetric of torchmetrics' accuracy, synced when computed;
    # train/images_per_sec (brisk.callbacks.SpeedMeter) is every rank's images over rank 0's clock, logged on rank
    # 0 only. A metric of any other name still gets the advice.
    (r"It is recommended to use `self\.log\('(val/acc_best|train/images_per_sec)', \.\.\., sync_dist=True\)`", Warning),
)

# Log lines dropped (the start of the message), all written through Lightning's rank_zero_info to LOGGER.
LOGGER = "lightning.pytorch.utilities.rank_zero"
LOG_LINES = (
    # Lightning's advertisements for its cloud services (litlogger, litmodels), on every Trainer built.
    "💡 Tip:",
    # Lightning's own line for the precision plugin: brisk.run.precision.report says which precision the run got.
    "Using 16bit Automatic Mixed Precision",
    "Using bfloat16 Automatic Mixed Precision",
    # The Trainer has brisk's model summary (brisk.callbacks.ModelSummary, which counts FLOPs), so it adds none.
    "Trainer already configured with model summary callbacks",
)


def known_harmless(record: logging.LogRecord) -> bool:
    """A `logging` filter: False (drop it) for a line that starts as one of LOG_LINES."""
    return not record.getMessage().startswith(LOG_LINES)


def quiet() -> None:
    """Drop the known harmless warnings and log lines above. Safe to call again: nothing is added twice."""
    for message, category in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    logging.getLogger(LOGGER).addFilter(known_harmless)
