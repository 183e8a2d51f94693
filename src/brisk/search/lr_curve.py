"""The LR finder's curve and brisk's suggestion from it: the steepest descent of the smoothed loss, over the range
where the loss is still falling, or no value and why.

Lightning's own `suggestion()` takes the steepest gradient anywhere past its first 10 points, of a curve smoothed
with an exponential average of beta 0.98. Measured on data=synthetic (2000 images, width 8, batch 100, 100 steps
from 1e-8 to 1): that average lags the losses by about 49 steps, 4 of the 8 decades, so the curve only starts to
fall at the end; its bias correction is one step off, so it starts at half the true loss and rises for ~20 steps;
and the steepest gradient it finds is a noise dip in the flat start (2.09e-6, 6.9e-5 and 1.2e-6 measured, where
0.05 trains). So brisk recovers the per-step losses, smooths them with a centred window (no lag), and looks for
the steepest descent only between the top of the curve and its lowest point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# lightning 2.6.6, tuner/lr_finder.py `_LRCallback`: avg = BETA * avg + (1 - BETA) * loss, and it records
# avg / (1 - BETA ** (global_step + 1)), where global_step already counts the step just taken. Tuner.lr_find
# does not pass beta. tests/run/test_tune.py checks beta against Lightning's signature, and (marked slow) that a
# real run's recovered losses start at the untrained loss, not at half of it.
BETA = 0.98
MIN_POINTS = 20  # fewer finite losses than this make no curve: 5 per decade of the default range is too coarse
# A fall is real when it is this many times the spread of the losses around their smoothed curve. Measured on the
# curve above: that spread is 0.025 (raw losses at 2.47 +- 0.025), a flat curve's smoothed dips reach 0.05, and the
# real fall is 1.3 (100 steps) to 2.2 (200 steps). 8 spreads (0.2) leaves room on both sides.
MIN_FALL_IN_SPREADS = 8


@dataclass(frozen=True)
class Suggestion:
    lr: float | None  # None: the curve suggests nothing, and `reason` says why
    reason: str
    lrs: list[float]  # the curve brisk read: learning rates, the recovered per-step losses, their smoothed line
    losses: list[float]
    smoothed: list[float]
    index: int | None = None  # the suggested point on the curve


def unsmooth(recorded: list[float]) -> np.ndarray:
    """The per-step training losses behind the smoothed ones Lightning's finder records (NaN where it recorded NaN:
    a step without a loss, which does not move its average)."""
    recorded = np.asarray(recorded, dtype=float)
    losses = np.full_like(recorded, np.nan)
    avg, step = 0.0, 0
    for i, value in enumerate(recorded):
        if not np.isfinite(value):
            continue
        step += 1
        new_avg = value * (1 - BETA ** (step + 1))
        losses[i] = (new_avg - BETA * avg) / (1 - BETA)
        avg = new_avg
    return losses


def smooth(losses: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average over `width` points (fewer at the ends): a smoothed curve that does not lag."""
    half = width // 2
    return np.array([losses[max(0, i - half) : i + half + 1].mean() for i in range(len(losses))])


def suggest(lrs: list[float], losses: list[float]) -> Suggestion:
    """The learning rate at the steepest descent of the smoothed loss, between the curve's top and its lowest point
    (past the lowest point the loss rises: divergence), if the fall there is real."""
    lrs, losses = np.asarray(lrs, dtype=float), np.asarray(losses, dtype=float)
    finite = np.isfinite(losses) & np.isfinite(lrs) & (lrs > 0)
    lrs, losses = lrs[finite], losses[finite]
    width = max(5, len(losses) // 20) | 1  # odd; 5 points of 100, 11 of 200: about 0.4 decade of the default range
    smoothed = smooth(losses, width) if len(losses) else losses

    def nothing(reason: str) -> Suggestion:
        return Suggestion(None, reason, lrs.tolist(), losses.tolist(), smoothed.tolist())

    if len(losses) < MIN_POINTS:
        return nothing(f"the finder recorded {len(losses)} losses, too few for a curve (at least {MIN_POINTS})")
    low = int(np.argmin(smoothed))
    top = int(np.argmax(smoothed[: low + 1]))
    fall = smoothed[top] - smoothed[low]
    spread = float(np.median(np.abs(losses - smoothed))) * 1.4826  # the standard deviation, robust to divergence
    if low - top < 2 or fall < MIN_FALL_IN_SPREADS * spread:
        return nothing(
            f"the smoothed loss falls by {fall:.3g} at most, within the noise (spread {spread:.2g}): the curve is "
            "flat or too noisy"
        )
    slopes = np.gradient(smoothed, np.log(lrs))  # per unit of log lr: each decade weighs the same
    index = top + int(np.argmin(slopes[top : low + 1]))
    reason = (
        f"steepest descent of the smoothed loss, which falls from {smoothed[top]:.3g} at lr={lrs[top]:.2g} "
        f"to {smoothed[low]:.3g} at lr={lrs[low]:.2g}"
    )
    return Suggestion(float(lrs[index]), reason, lrs.tolist(), losses.tolist(), smoothed.tolist(), index)
