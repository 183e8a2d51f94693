"""Framework overhead: a brisk fit against a plain PyTorch loop doing the same work, interleaved."""

from __future__ import annotations

import math

from omegaconf import DictConfig

from brisk_lab.fit import DataCache, measure_fit
from brisk_lab.plain import plain_loop
from brisk_lab.progress import progress
from brisk_lab.stats import in_turn, median, paired_ratio, round_ratios, spread


def compare(cfg: DictConfig, warmup: int, steps: int, rounds: int, data: DataCache, label: str = "overhead") -> dict:
    """Both sides start from the same seed, so after the same steps they should hold the same loss. `label` names
    the comparison in the progress lines (the model, or the speedrun's cost per step)."""
    brisk, plain = [], []
    plain_data = DataCache()  # the plain loop's own: each round would read the splits again (1.2 s at 50,000)
    for r in range(rounds):
        progress(f"{label} round {r + 1}/{rounds}")
        sides = [
            (brisk, lambda: measure_fit(cfg, warmup, steps, data)),
            (plain, lambda: plain_loop(cfg, warmup, steps, data=plain_data)),
        ]
        for results, run in in_turn(sides, r):
            results.append(run())
    return summary(brisk, plain, cfg.data.batch_size, warmup + steps)


def summary(brisk: list[dict], plain: list[dict], batch_size: int, steps: int) -> dict:
    """The rounds' figures: each side's median images/s, and the ratio as the median of the round-by-round ratios
    (stats.paired_ratio), with those ratios, so that a table can say what its ratio is made of."""
    fast = [r["images_per_sec"] for r in brisk]
    bare = [r["images_per_sec"] for r in plain]
    loss_brisk, loss_plain = brisk[0]["loss"], plain[0]["loss"]
    return {
        "batch_size": batch_size,
        "precision": brisk[0]["precision"],
        "steps": steps,
        "plain_images_per_sec": median(bare),
        "brisk_images_per_sec": median(fast),
        "ratio": paired_ratio(fast, bare),  # not brisk_images_per_sec / plain_images_per_sec
        "round_ratios": round_ratios(fast, bare),
        # What brisk adds to each step, in time: noise at big batches, the framework's cost at tiny ones.
        "extra_ms_per_step": 1e3 * (median([r["batch_s"] for r in brisk]) - median([r["batch_s"] for r in plain])),
        "spread": max(spread(fast), spread(bare)),
        "brisk_fixed_s": median([r["fixed_s"] for r in brisk]),
        "loss_plain": loss_plain,
        "loss_brisk": loss_brisk,
        "same_loss": math.isclose(loss_brisk, loss_plain, rel_tol=1e-4, abs_tol=1e-6),
        "rounds": {"brisk": brisk, "plain": plain},
    }
