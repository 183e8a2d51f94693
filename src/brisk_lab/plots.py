"""One PNG per part: bars of images/s (and peak memory for the levers). Needs matplotlib (the `plots` extra)."""

from __future__ import annotations

from pathlib import Path

from brisk import published
from brisk_lab.report import MEDIAN_OF_ROUNDS


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, labels: list[str], values: list[float], colors=None) -> None:
    # Positions, not the labels themselves: labels such as "1" and "2" would be read as numbers.
    bars = ax.bar(range(len(labels)), values, color=colors)
    ax.set_xticks(range(len(labels)), labels)
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
    ax.set_ylabel("images/s")


def pipeline(p: dict, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    rates = [p["classic_images_per_sec"], p["brisk_images_per_sec"], p["brisk_resident_images_per_sec"]]
    _bars(ax, ["classic (PIL)", "brisk", "brisk, resident"], rates, ["#999", "#2a7", "#27a"])
    # The bars are medians; the ratio is the median of the rounds' ratios, not the bars' ratio, so the title says which.
    ax.set_title(
        f"Input pipeline, batch {p['batch_size']}: brisk {p['ratio']:.1f}x classic ({MEDIAN_OF_ROUNDS})",
        fontsize=10,
    )
    fig.tight_layout()
    with published(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def overhead(o: dict[str, dict], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    models = list(o)
    width = 0.38
    xs = range(len(models))
    for shift, side, color in ((-width / 2, "plain", "#999"), (width / 2, "brisk", "#2a7")):
        values = [o[m][f"{side}_images_per_sec"] for m in models]
        bars = ax.bar(
            [x + shift for x in xs],
            values,
            width,
            label=f"{side} loop" if side == "plain" else "brisk fit",
            color=color,
        )
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
    ax.set_xticks(list(xs), [f"{m}\nbrisk/plain {o[m]['ratio']:.3f}\n({MEDIAN_OF_ROUNDS})" for m in models])
    ax.set_ylabel("images/s")
    ax.legend(fontsize=8)
    ax.set_title("Framework overhead: brisk fit vs plain PyTorch loop", fontsize=10)
    fig.tight_layout()
    with published(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def lever(name: str, result: dict, path: Path) -> None:
    plt = _pyplot()
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [r["label"] for r in rows]
    _bars(ax, labels, [r["images_per_sec"] for r in rows], "#2a7")
    if "reference" in result:
        ref = result["reference"]
        ax.axhline(ref["images_per_sec"], color="#c33", linestyle="--", linewidth=1)
        ax.annotate(ref["label"], (0, ref["images_per_sec"]), fontsize=7, color="#c33", va="bottom")
    memory = ax.twinx()
    memory.plot(range(len(rows)), [r["added_mb"] for r in rows], "o-", color="#36c")
    memory.set_ylabel(f"{rows[0]['memory']}, added (MB)", color="#36c")
    memory.set_ylim(bottom=0)
    ax.set_xlabel(name)
    ax.set_title(f"Lever: {name}", fontsize=10)
    fig.tight_layout()
    with published(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
