"""Medians and paired ratios of interleaved rounds."""

from __future__ import annotations

import statistics


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def round_ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    """Each round's numerator over the same round's denominator, in round order (a zero denominator is left out)."""
    return [a / b for a, b in zip(numerator, denominator, strict=True) if b]


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median of round-by-round ratios: rounds run back to back, so a machine that slows down
    (other jobs, heat) slows both sides of a round alike and the ratio keeps its meaning. It is not the ratio of
    the two sides' medians, and can differ from it by more than the rounding of a table (in one quick-preset run,
    medians of 197 and 176 images/s, a ratio of 0.89, beside a median round ratio of 0.976): the tables name it and
    print its rounds."""
    return median(round_ratios(numerator, denominator))


def spread(values: list[float]) -> float:
    """(max - min) / median, as a rough noise figure for a table."""
    return (max(values) - min(values)) / median(values) if len(values) > 1 and median(values) else 0.0


def in_turn(items: list, round_index: int) -> list:
    """Items in order on even rounds and reversed on odd ones (a b, b a, ...), so that no side always
    runs first, after the same neighbour, in the same phase of whatever else the machine is doing."""
    return list(items) if round_index % 2 == 0 else list(items)[::-1]
