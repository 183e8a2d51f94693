"""The lever sweep: one lever varied at a time from the base config, each value a measured fit.

A lever is a Hydra override key and its values (`key: data.batch_size, values: [128, 256]`), or a
mapping from a label to the overrides of that value (`values: {"2": [trainer.devices=2, strategy=ddp]}`).
Any key brisk-train takes can be a lever, e.g. bench.levers.optimizer={key: optimizer, values: [sgd, adamw]}.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, ListConfig

from brisk import BriskError, build_datamodule
from brisk_lab.compose import compose_with, run_child
from brisk_lab.cost import net_cost
from brisk_lab.fit import DataCache, measure_fit
from brisk_lab.progress import progress
from brisk_lab.stats import in_turn, median

NUMBERS = ("images_per_sec", "batch_s", "epoch_s", "peak_mb", "added_mb", "first_step_s", "fixed_s")


def _text(value) -> str:
    """A value as Hydra's command line spells it."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def settings(name: str, spec: DictConfig) -> list[tuple[str, list[str]]]:
    """(label, overrides) for each value of the lever `name`."""
    values = spec.get("values") if isinstance(spec, DictConfig) else None
    if isinstance(values, DictConfig) and values:
        return [(str(label), [o] if isinstance(o, str) else list(o)) for label, o in values.items()]
    if isinstance(values, ListConfig) and values and spec.get("key"):
        return [(_text(v), [f"{spec.key}={_text(v)}"]) for v in values]
    raise BriskError(
        f"bench.levers.{name} needs `key` and a list of `values` (e.g. {{key: data.batch_size, "
        "values: [128, 256]}), or `values` as a mapping from a label to its overrides."
    )


def plan(name: str, spec: DictConfig) -> list[tuple[str, list[str], DictConfig]]:
    """(label, overrides, composed config) for each value of the lever `name`."""
    return [(label, o, compose_with(o, f"bench.levers.{name}")) for label, o in settings(name, spec)]


def _row(label: str, overrides: list[str], cfg: DictConfig, runs: list[dict]) -> dict:
    data = build_datamodule(cfg)  # reads nothing: its classes and image size size the net
    row = {k: median([r[k] for r in runs]) for k in NUMBERS}
    row.update(
        label=label,
        overrides=overrides,
        epoch_batches=runs[0]["epoch_batches"],
        precision=runs[0]["precision"],
        world_size=runs[0]["world_size"],
        batch_size=cfg.data.batch_size,
        accumulation=cfg.trainer.get("accumulate_grad_batches", 1),
        memory=runs[0]["memory"],
        **net_cost(cfg.model.net, data.num_classes, data.image_size),
    )
    if cfg.model.get("compile"):
        # The first step traces and compiles. From the first round: later ones find inductor's on-disk cache.
        row["compile_s"] = runs[0]["first_step_s"] - row["batch_s"]
    return row


def sweep(
    name: str,
    spec: DictConfig,
    values: list,
    warmup: int,
    steps: int,
    rounds: int,
    run_dir: Path,
    data: DataCache,
    timeout_s: float,
) -> dict:
    """Rounds interleave the values, each round in the reverse order of the last, and each row holds the
    medians. `values` is plan()'s."""
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in values}
    for r in range(rounds):
        for label, overrides, cfg in in_turn(values, r):
            progress(f"{name}={label} round {r + 1}/{rounds}")
            if spec.get("subprocess"):
                child_dir = run_dir / "levers" / name / f"{label}-{r}"
                runs[label].append(run_child(overrides, child_dir, warmup, steps, timeout_s))
            else:
                runs[label].append(measure_fit(cfg, warmup, steps, data))
    rows = [_row(label, overrides, cfg, runs[label]) for label, overrides, cfg in values]
    out = {"key": spec.get("key"), "rows": rows, "rounds": rounds, "batches": steps}
    if spec.get("reference"):
        out["reference"] = dict(spec.reference)
    return out
