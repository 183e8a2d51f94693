"""experiment=speedrun measured: what each part of the recipe buys, and what brisk costs per step on its path.

The ablation fits the recipe with all its parts on, then with each part off in turn (`bench.speedrun.parts`),
over several seeds, and reads each fit's time-to-accuracy clock (brisk.callbacks.TimeToAccuracy): the first
validation at or over `target_acc` (epochs, optimizer steps, seconds on that clock) and the final test with the
recipe's TTA. A row whose fits never reach the target is kept and shown as not reached.

The cost per step is the overhead comparison (overhead.py) on the speedrun path at nil compute: the lab's NilNet
in place of AirbenchNet, and everything else of the recipe (resident data, alternating flips, crop, the optimizer
stated per 1024 examples with its 64x bias lr, the warm-up-then-decay schedule, lookahead, label smoothing).
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable

import lightning as L
from omegaconf import DictConfig, open_dict

from brisk import BriskError, TimeToAccuracy, build
from brisk_lab import overhead
from brisk_lab.compose import compose_with
from brisk_lab.fit import DataCache
from brisk_lab.progress import progress
from brisk_lab.stats import median

ALL_ON = "all on"


def plan(spec: DictConfig, compose: Callable[[list[str], str], DictConfig] = compose_with) -> dict:
    """Every fit's config, composed before any runs: {row: {seed: config}} and the nil-compute config.
    `compose(overrides, where)`: the lab's compose_with, or in a test one without brisk-bench's command line."""
    base = [*spec.overrides, *spec.ablation]
    # parts=null: the all-on row alone (a command-line {} merges into the parts, it does not empty them).
    rows = {ALL_ON: [], **{name: list(off) for name, off in (spec.parts or {}).items()}}
    fits = {
        name: {seed: compose([*base, *off, f"seed={seed}"], f"bench.speedrun.parts.{name}") for seed in spec.seeds}
        for name, off in rows.items()
    }
    for name, seeds in fits.items():
        target = next(iter(seeds.values())).get("target_acc")
        if target is None:
            raise BriskError(
                f"bench.speedrun: the row '{name}' composes with target_acc=null, and the ablation times the fits to "
                "a target: set target_acc (e.g. target_acc=0.6 in bench.speedrun.ablation)."
            )
    return {"rows": rows, "fits": fits, "overhead": compose([*spec.overrides, *spec.nil], "bench.speedrun.nil")}


def run_fit(cfg: DictConfig, data: DataCache) -> dict:
    """One fit and its test, in this process, its files in a scratch folder: the clock's report."""
    with tempfile.TemporaryDirectory(prefix="brisk-speedrun-") as scratch:
        with open_dict(cfg):
            cfg.paths.output_dir = scratch
            # A lab fit, without the lab's clock: a stop signal says the bench is run again (brisk_lab.clock.LabFit)
            if cfg.get("callbacks") is None:
                cfg.callbacks = {}
            cfg.callbacks.lab_fit = {"type": "lab_fit"}
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        trainer, datamodule, model = build(cfg, data.get(cfg))
        trainer.fit(model, datamodule=datamodule)
        trainer.test(model, datamodule=datamodule, verbose=False)
        clock = next(c for c in trainer.callbacks if isinstance(c, TimeToAccuracy))  # target_acc puts it there
        report = clock.report()
    val, test = report["val"], report["test"] or {}
    history = report["history"]
    return {
        "seed": int(cfg.seed),
        "reached": val is not None,
        "epochs": val and val["epoch"],
        "steps": val and val["steps"],
        "seconds": val and val["seconds"],
        "final_val_acc": history[-1]["acc"] if history else None,
        "test_acc": test.get("acc"),
        "test_seconds": test.get("test_seconds"),  # the final test alone; its "seconds" are the whole clock
    }


def _summary(runs: list[dict]) -> dict:
    reached = [r for r in runs if r["reached"]]
    out = {"reached": len(reached), "seeds": len(runs), "test_acc": median([r["test_acc"] for r in runs])}
    for key in ("epochs", "steps", "seconds"):
        values = [r[key] for r in reached]
        out[key] = median(values) if values else None  # over the seeds that reached it: `reached` says how many
        out[f"{key}_range"] = [min(values), max(values)] if values else None
    return out


def cost_per_step(result: dict) -> dict:
    """brisk's extra milliseconds per step over the plain loop, round by round (each round ran both sides)."""
    rounds = result["rounds"]
    extra = [1e3 * (b["batch_s"] - p["batch_s"]) for b, p in zip(rounds["brisk"], rounds["plain"], strict=True)]
    return {"median_ms": median(extra), "range_ms": [min(extra), max(extra)], "per_round_ms": extra}


def compare(planned: dict, spec: DictConfig, rounds: int, data: DataCache) -> dict:
    rows = []
    fits = sum(len(seeds) for seeds in planned["fits"].values())
    done = 0
    for name, seeds in planned["fits"].items():
        runs = []
        for seed, cfg in seeds.items():
            done += 1
            progress(f"speedrun fit {done}/{fits}: {name if name == ALL_ON else name + ' off'}, seed {seed}")
            runs.append(run_fit(cfg, data))
        rows.append({"part": name, "off": planned["rows"][name], "runs": runs, **_summary(runs)})
    nil = planned["overhead"]
    step = overhead.compare(nil, spec.warmup, spec.steps, rounds, data, label="speedrun cost per step")
    plain_lightning = copy.deepcopy(nil)
    with open_dict(plain_lightning):
        plain_lightning.fast_loop = False  # what brisk.fastloop buys on this path
    without = overhead.compare(
        plain_lightning, spec.warmup, spec.steps, rounds, data, label="speedrun cost per step, fast_loop=false,"
    )
    first = next(iter(next(iter(planned["fits"].values())).values()))
    return {
        "target": float(first.target_acc),
        "ablation": list(spec.ablation),
        "rows": rows,
        "overhead": step,
        "cost_per_step": {**cost_per_step(step), "target_ms": float(spec.target_ms)},
        "cost_per_step_without_fast_loop": cost_per_step(without),
    }
