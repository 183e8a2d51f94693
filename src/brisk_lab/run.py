"""brisk-bench's order of work: compose every config first, run the parts asked for, write bench.json,
bench.md and the plots after each part, print the tables and the run directory."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from brisk import BriskError, hardware, resolve_precision, write_json, write_text
from brisk_lab import augment_cost, breakdown, levers, overhead, pipeline, plots, report, speedrun
from brisk_lab.compose import compose_with, task_overrides
from brisk_lab.fit import DataCache, measure_fit
from brisk_lab.progress import progress
from brisk_lab.progress import start as start_progress

log = logging.getLogger("brisk")
PARTS = ("pipeline", "augment", "overhead", "breakdown", "fit", "speedrun")


def _count(bench: DictConfig, key: str, least: int = 1) -> int:
    value = OmegaConf.select(bench, key)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise BriskError(f"bench.{key}={value} must be a whole number >= {least}.")
    return value


def plan(cfg: DictConfig) -> dict[str, Any]:
    """The config(s) of each part asked for, all composed before any work: a typo costs seconds, not a lab."""
    bench = cfg.bench
    lever_specs = bench.get("levers") or {}
    known = [*PARTS, *lever_specs]
    for part in bench.get("run") or []:
        if part not in known:
            raise BriskError(f"bench.run: unknown part '{part}'. Choose from: {', '.join(known)}.")
    counts = ["rounds", "pipeline.batch_size", "augment.batch_size", "augment.repeats", "fit.warmup", "fit.steps"]
    counts += ["overhead.warmup", "overhead.steps"]
    counts += [f"{part}.{key}" for part in ("breakdown", "sweep", "speedrun") for key in ("warmup", "steps", "rounds")]
    for key in counts:
        _count(bench, key)
    _count(bench, "pipeline.workers", least=0)
    plans: dict[str, Any] = {}
    for part in bench.run:
        if part == "pipeline":
            plans[part] = compose_with([f"data.batch_size={bench.pipeline.batch_size}"], "bench.pipeline")
        elif part == "augment":
            size = f"data.batch_size={bench.augment.batch_size}"
            plans[part] = {o: compose_with([f"augment={o}", size], "bench.augment") for o in bench.augment.options}
        elif part == "overhead":
            extra = list(bench.overhead.overrides or [])
            plans[part] = {m: compose_with([f"model={m}", *extra], "bench.overhead") for m in bench.overhead.models}
        elif part == "breakdown":
            plans[part] = compose_with(list(bench.breakdown.overrides or []), "bench.breakdown")
        elif part == "fit":
            plans[part] = cfg
        elif part == "speedrun":
            plans[part] = speedrun.plan(bench.speedrun)
        else:
            plans[part] = levers.plan(part, lever_specs[part])
    return plans


def _part(part: str, planned: Any, bench: DictConfig, run_dir: Path, data: DataCache) -> dict:
    if part == "pipeline":
        return pipeline.compare(planned, bench.pipeline.workers, bench.rounds, bool(bench.pipeline.get("loaded")))
    if part == "augment":
        return augment_cost.compare(planned, bench.augment.repeats, bench.rounds)
    if part == "overhead":
        o = bench.overhead
        return {
            model: overhead.compare(c, o.warmup, o.steps, bench.rounds, data, label=f"overhead {model}")
            for model, c in planned.items()
        }
    if part == "breakdown":
        b = bench.breakdown
        return breakdown.compare(planned, b.warmup, b.steps, b.rounds, data)
    if part == "fit":
        return measure_fit(planned, bench.fit.warmup, bench.fit.steps, data)
    if part == "speedrun":
        return speedrun.compare(planned, bench.speedrun, bench.speedrun.rounds, data)
    s = bench.sweep
    return levers.sweep(part, bench.levers[part], planned, s.warmup, s.steps, s.rounds, run_dir, data, bench.timeout_s)


def machine() -> dict:
    info = hardware()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = names[0] if names else info["cpu"]
    info["cpu_threads_used"] = torch.get_num_threads()
    info["memory_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    # Other work on the machine: with it, torch's OpenMP threads wait on each other and timings scatter.
    info["load_average_at_start"] = round(os.getloadavg()[0], 2)
    return info


def base(cfg: DictConfig) -> str:
    """The base config in words, for the table headers."""
    choices = HydraConfig.get().runtime.choices
    device = "cuda" if torch.cuda.is_available() and str(cfg.trainer.accelerator) != "cpu" else "cpu"
    precision = resolve_precision(cfg.trainer.precision, str(cfg.trainer.accelerator))
    return (
        f"{choices.get('model')}, batch {cfg.data.batch_size}, precision {precision}, "
        f"accumulation {cfg.trainer.accumulate_grad_batches}, {device}"
    )


def describe(m: dict) -> str:
    gpus = f", {len(m['gpus'])} x {m['gpus'][0]}" if m.get("gpus") else ", no GPU"
    return (
        f"{m['cpu']}, {m['cpu_count']} CPU cores ({m['cpu_threads_used']} torch threads), {m['memory_gb']} GB{gpus}; "
        f"torch {m['torch']}, lightning {m['lightning']}, Python {m['python']}; "
        f"load average {m['load_average_at_start']} at the start"
    )


def markdown(results: dict) -> str:
    out = [f"## brisk-bench\n\n`{results['command']}`\n\nMachine: {describe(results['machine'])}."]
    for name, result in results["parts"].items():
        if name == "pipeline":
            out.append(report.pipeline(result))
        elif name == "augment":
            out.append(report.augment(result))
        elif name == "overhead":
            out.append(report.overhead(result))
        elif name == "breakdown":
            out.append(report.breakdown(result))
        elif name == "fit":
            out.append(report.fit(result, results["base"]))
        elif name == "speedrun":
            out.append(report.speedrun(result))
        else:
            out.append(report.lever(name, result, results["base"]))
    return "\n\n".join(out) + "\n"


def draw(name: str, result: dict, run_dir: Path) -> None:
    path = run_dir / f"{name}.png"
    if name == "pipeline":
        plots.pipeline(result, path)
    elif name == "overhead":
        plots.overhead(result, path)
    elif name not in ("fit", "breakdown", "augment", "speedrun"):
        plots.lever(name, result, path)


def write(results: dict, run_dir: Path) -> str:
    """bench.json and bench.md, rewritten after every part: a stopped lab keeps what it measured."""
    write_json(run_dir / "bench.json", results)
    text = markdown(results)
    write_text(run_dir / "bench.md", text)
    return text


def quiet_lightning() -> None:
    """The lab runs dozens of fits: keep Lightning's per-fit notices out of the tables (warnings still show)."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    for message in (".*smaller than the logging interval.*", ".*LeafSpec.*is deprecated.*"):
        warnings.filterwarnings("ignore", message=message)


def run(cfg: DictConfig) -> dict:
    plans = plan(cfg)
    quiet_lightning()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    results = {
        "command": " ".join(["brisk-bench", *task_overrides()]),
        "machine": machine(),
        "base": base(cfg),
        "parts": {},
        "seconds": {},
    }
    if results["machine"]["load_average_at_start"] > 0.5 * (os.cpu_count() or 1):
        log.warning(
            "the machine is busy (load average %s): timings will scatter", results["machine"]["load_average_at_start"]
        )
    data = DataCache()
    start = time.perf_counter()
    start_progress()
    text = ""
    for i, (part, planned) in enumerate(plans.items(), 1):
        progress(f"part {i}/{len(plans)}: {part}")
        t = time.perf_counter()
        results["parts"][part] = _part(part, planned, cfg.bench, run_dir, data)
        results["seconds"][part] = round(time.perf_counter() - t, 1)
        results["seconds"]["total"] = round(time.perf_counter() - start, 1)
        if rank_zero_only.rank == 0:  # the other ranks of a DDP `fit` write nothing
            text = write(results, run_dir)
            draw(part, results["parts"][part], run_dir)
    if rank_zero_only.rank == 0:
        print(text, flush=True)
        print(run_dir, flush=True)  # the last line, as with brisk-train
    return results
