"""The speed lab at tiny sizes: it runs, compares like with like, and writes well-formed outputs.

No speed is asserted here: timings are the lab's output, not a test's. What is tested is what the
figures rest on: both pipelines do the same work, the plain loop and the brisk fit reach the same
loss, the clock counts only the measured steps, the memory reading sees an allocation, and the
CLI writes bench.json, bench.md and a PNG per part.
"""

# ruff: noqa: E402
from __future__ import annotations

import copy
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The lab is removable (tests/test_lab_boundary.py): without it these tests skip, so its imports come after.
pytest.importorskip("brisk_lab")

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf, open_dict

from brisk import build
from brisk.cli import unknown_group_option
from brisk.data import augment as aug
from brisk.errors import BriskError
from brisk_lab import breakdown, call_budget, levers, overhead, pipeline, report, speedrun
from brisk_lab.bench import CONFIG_PATH
from brisk_lab.clock import Window
from brisk_lab.fit import DataCache, measure_fit
from brisk_lab.memory import PeakMemory
from brisk_lab.plain import plain_loop
from brisk_lab.run import plan
from helpers import TINY, compose_cfg, run_cli, run_dir_of

# Each distinct (overrides, root) is composed once in this module (a compose costs 0.3-0.7 s, and the lever test, the
# call budget and the breakdown compose many of the same ones); every caller gets a copy of its own to change.
_COMPOSED: dict[tuple, DictConfig] = {}


def compose_bench(overrides: list[str], root) -> DictConfig:
    """The config brisk-bench would see: its own conf/, which reaches brisk-train's through the search path."""
    key = (tuple(overrides), str(root))
    if key not in _COMPOSED:
        _COMPOSED[key] = compose_cfg(list(overrides), root, config_name="bench", config_dir=CONFIG_PATH)
    return copy.deepcopy(_COMPOSED[key])


def _windows(padded: torch.Tensor, size: int) -> list[torch.Tensor]:
    span = padded.shape[-1] - size + 1
    return [padded[:, dy : dy + size, dx : dx + size] for dy in range(span) for dx in range(span)]


def test_crop_with_flip_gives_translated_or_mirrored_windows():
    torch.manual_seed(0)
    x = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    y = aug.random_crop(x, pad=4, flip=True)
    padded = F.pad(x, (4, 4, 4, 4))
    mirrored = 0
    for i in range(len(x)):
        windows = _windows(padded[i], 32)
        plain = any(torch.equal(w, y[i]) for w in windows)
        flipped = any(torch.equal(w.flip(2), y[i]) for w in windows)
        assert plain or flipped, f"image {i} is neither a window of its padded original nor a mirrored one"
        mirrored += flipped and not plain
    assert 10 < mirrored < 54, f"{mirrored} of 64 mirrored; about half should be"


def test_normalize_matches_the_classic_totensor_normalize():
    """The pipeline comparison is fair only if both sides produce the same tensors from the same image."""
    torch.manual_seed(0)
    x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
    mean, std = [125.3, 123.0, 113.9], [63.0, 62.1, 66.7]
    transform = pipeline.classic_transform(0, False, 32, mean, std)
    classic = pipeline.ClassicCIFAR(x, torch.zeros(8, dtype=torch.long), transform)
    expected = torch.stack([classic[i][0] for i in range(len(x))])
    assert torch.allclose(aug.normalize(x, mean, std), expected, atol=1e-5)
    assert torch.equal(torch.from_numpy(classic.data).permute(0, 3, 1, 2), x), "HWC, as torchvision keeps CIFAR"


def _busy_loops() -> set[int]:
    """The processes running pipeline.busy_cores' loop."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"while True: pass" in (proc / "cmdline").read_bytes():
                found.add(int(proc.name))
        except OSError:
            pass
    return found


def test_pipeline_part_has_resident_and_loaded_rows_and_stops_its_busy_loops(brisk_root):
    """In process, one round: the quiet and loaded rows, the resident one among them, the load recorded, and no
    busy-loop process left when it returns."""
    cfg = compose_bench([*TINY, "augment=standard"], brisk_root)
    before = _busy_loops()
    p = pipeline.compare(cfg, workers=0, rounds=1, loaded=True)
    assert _busy_loops() == before
    for side in (p, p["loaded"]):
        assert side["brisk_resident_images_per_sec"] > 0 and side["classic_images_per_sec"] > 0
    load = p["loaded"]
    assert load["busy_processes"] >= 2 and load["load_average"] >= 0
    assert load["brisk_default_threads_images_per_sec"] > 0
    table = report.pipeline(p)
    assert "| brisk, data.resident on cpu |" in table and "| loaded, brisk, data.resident |" in table
    assert f"load average {load['load_average']}" in table


def _row_of(table: str, first_cell: str) -> dict[str, str]:
    """The table's row that starts with `first_cell`, as {header: cell}, bold marks dropped."""
    lines = [line for line in table.splitlines() if line.startswith("| ")]

    def cells(line: str) -> list[str]:
        return [c.strip().strip("*") for c in line.strip().strip("|").split("|")]

    row = next(line for line in lines if cells(line)[0] == first_cell)
    return dict(zip(cells(lines[0]), cells(row), strict=True))


def _figure(row: dict[str, str], column: str) -> float:
    """The number in the first column whose header starts with `column` ("1,284" -> 1284.0, "23.6x" -> 23.6)."""
    return float(row[next(h for h in row if h.startswith(column))].replace(",", "").rstrip("x"))


def _ratio_agrees_with_its_header(row: dict[str, str], name: str, numerator: float, denominator: float) -> float:
    """A ratio column is read as the ratio of the printed medians (`numerator` / `denominator`) unless its header
    says it is the median of the round ratios; then the row must print those rounds, and the ratio is their median."""
    header = next(h for h in row if h.startswith(name))
    ratio = _figure(row, name)
    if "median of round ratios" in header:
        rounds = [float(v) for v in row["round ratios"].split(",")]
        assert ratio == pytest.approx(statistics.median(rounds)), row
    else:
        assert ratio == pytest.approx(numerator / denominator, rel=5e-3), (
            f"{header}: {ratio} != {numerator} / {denominator}"
        )
    return ratio


def _overhead_round(images_per_sec: float) -> dict:
    return {
        "images_per_sec": images_per_sec,
        "batch_s": 512 / images_per_sec,
        "fixed_s": 1.0,
        "loss": 1.5,
        "precision": "32-true",
    }


def test_overhead_table_ratio_is_what_its_header_says():
    """Issue 41: a quick-preset row read `| simple_cnn | 512 | 32-true | 197 | 176 | 0.976 |`, but 176 / 197 = 0.89.
    The same medians and ratio from three known rounds: the table must say what 0.976 is and print its rounds."""
    plain, brisk = [197.0, 150.0, 230.0], [140.0, 176.0, 224.5]  # round by round 0.711, 1.173, 0.976
    o = overhead.summary([_overhead_round(v) for v in brisk], [_overhead_round(v) for v in plain], 512, 12)
    row = _row_of(report.overhead({"simple_cnn": o}), "simple_cnn")
    assert (_figure(row, "plain images/s"), _figure(row, "brisk images/s")) == (197, 176)
    brisk_median, plain_median = _figure(row, "brisk images/s"), _figure(row, "plain images/s")
    assert _ratio_agrees_with_its_header(row, "brisk / plain", brisk_median, plain_median) == 0.976
    assert row["round ratios"] == "0.711, 1.173, 0.976", "in round order, each round's brisk / plain"


def test_pipeline_table_ratios_are_what_their_header_says():
    """The pipeline's ratios are medians of round ratios too; from known passes, each row agrees with its header."""
    passes = {"classic": [100.0, 80.0, 120.0], "brisk": [1500.0, 2400.0, 2000.0], "brisk_resident": [3000, 2000, 2600]}
    sides = {name: iter(values).__next__ for name, values in passes.items()}  # in_turn changes the order, not the count
    p = pipeline._rounds(sides, 3)
    p.update(images=1500, batch_size=50, augment={"crop_pad": 4}, device="cpu", workers=2)
    table = report.pipeline(p)
    classic = _figure(_row_of(table, "classic: PIL per sample, 2 DataLoader workers"), "images/s")
    for first, name in (
        ("brisk: uint8 tensor, batched ops", "brisk"),
        ("brisk, data.resident on cpu", "brisk_resident"),
    ):
        row = _row_of(table, first)
        ratio = _ratio_agrees_with_its_header(row, "vs classic", _figure(row, "images/s"), classic)
        expected = statistics.median(b / c for b, c in zip(passes[name], passes["classic"], strict=True))
        assert ratio == pytest.approx(expected, abs=0.05) and len(row["round ratios"].split(",")) == 3


def test_a_part_prints_a_progress_line_per_round(tiny_bench, capsys):
    """A part that takes minutes says how far it is, on stderr (stdout holds the tables), one line per round."""
    overhead.compare(tiny_bench, warmup=1, steps=2, rounds=2, data=DataCache(), label="overhead simple_cnn")
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("bench: ")]
    assert [line.split(" at ")[0].split(",")[0] for line in lines] == [
        "bench: overhead simple_cnn round 1/2",
        "bench: overhead simple_cnn round 2/2",
    ], err[-2000:]
    assert all(re.search(r", load \d+\.\d$", line) for line in lines) and "bench: " not in out


def test_window_times_only_the_steps_after_the_warmup():
    window = Window(warmup=2, steps=3, device=torch.device("cpu"))
    window.start()
    done = []
    for step in range(5):
        time.sleep(0.05 if step == 0 else 0.01)  # a slow first step, as with lazy init or compile
        done.append(window.tick(images=10))
    assert done == [False, False, False, False, True]
    r = window.result()
    assert r["batches"] == 3 and r["images_per_sec"] == pytest.approx(30 / (3 * r["batch_s"]))
    assert r["first_step_s"] >= 0.05 > r["batch_s"] >= 0.01


def test_window_counts_the_calls_of_the_steps_after_the_warmup():
    def step(extra: int) -> None:
        for _ in range(extra):
            abs(-1)  # one built-in call

    def calls(extra: int) -> float:
        window = Window(warmup=2, steps=4, device=torch.device("cpu"), count_calls=True)
        window.start()
        for s in range(6):
            step(50 if s < 2 else extra)  # the warm-up's calls are not counted
            window.tick(images=10)
        return window.result()["calls_per_step"]

    assert calls(10) - calls(3) == 7  # exact: a count, not a clock
    assert sys.getprofile() is None  # the window leaves no profiler behind


def test_peak_memory_sees_an_allocation_and_forgets_it_after_reset():
    memory = PeakMemory(torch.device("cpu"))
    memory.reset()
    block = torch.ones(200 * 2**20, dtype=torch.uint8)  # 200 MB, touched
    del block
    assert memory.read()["added_mb"] > 150
    memory.reset()
    assert memory.read()["added_mb"] < 100


@pytest.fixture(scope="module")
def tiny_bench(brisk_root):
    cfg = compose_bench([*TINY, "callbacks.progress_bar=null"], brisk_root)
    return cfg


def test_plain_loop_and_brisk_fit_reach_the_same_loss(tiny_bench):
    data = DataCache()
    brisk = measure_fit(tiny_bench, warmup=1, steps=4, data=data)
    plain = plain_loop(tiny_bench, warmup=1, steps=4)
    assert brisk["batches"] == plain["batches"] == 4
    assert brisk["images_per_sec"] > 0 and plain["images_per_sec"] > 0
    assert brisk["loss"] == pytest.approx(plain["loss"], rel=1e-5), "same seed, same batches, same steps"
    assert brisk["epoch_batches"] == 15 and brisk["peak_mb"] > brisk["added_mb"] > 0


def test_data_cache_shares_a_read_split_within_a_seed_only(tiny_bench):
    """Fits of the same data and seed share one DataModule, read once, and train as from a fresh one; another seed
    gets its own, since a DataModule orders its epochs by the seed it was made under."""
    data, plain_data = DataCache(), DataCache()
    first = measure_fit(tiny_bench, warmup=1, steps=4, data=data)
    assert measure_fit(tiny_bench, warmup=1, steps=4, data=data)["loss"] == first["loss"]
    plain = [plain_loop(tiny_bench, warmup=1, steps=4, data=plain_data)["loss"] for _ in range(2)]
    assert plain[0] == plain[1] == pytest.approx(first["loss"], rel=1e-5)
    other = tiny_bench.copy()
    other.seed = tiny_bench.seed + 1
    L.seed_everything(other.seed, verbose=False)
    module = data.get(other)
    assert module is not data.get(tiny_bench) and module.order_seed == other.seed
    assert data.get(other) is module


# experiment=speedrun as the lab composes it, small: one epoch, so Lookahead's pull at step 10 is a real one
# (at step 5 it barely moves the weights), and the schedule, whitening and alternating flips all change the loss.
TINY_SPEEDRUN = [o for o in TINY if not o.startswith("model.net.")] + ["model.net.widths=[16,32,32]"]


def speedrun_bench(brisk_root, extra: list[str] = ()) -> DictConfig:
    overrides = list(compose_bench([], brisk_root).bench.speedrun.overrides)
    return compose_bench([*TINY_SPEEDRUN, *overrides, "trainer.max_epochs=1", *extra], brisk_root)


def test_plain_loop_and_brisk_fit_reach_the_same_loss_on_the_speedrun_path(brisk_root):
    """The cost per step on the recipe's path is only fair if the plain loop does all the recipe's work: the
    whitening, dirac init, PerExamplesSGD with its 64x bias lr, the warm-up schedule, lookahead, alternating flips."""
    cfg = speedrun_bench(brisk_root)
    assert cfg.scheduler and cfg.callbacks.lookahead and cfg.data.augment.flip == "alternate" and cfg.data.resident
    brisk = measure_fit(cfg, warmup=1, steps=11, data=DataCache())
    plain = plain_loop(cfg, warmup=1, steps=11)
    assert brisk["batches"] == plain["batches"] == 11
    assert brisk["loss"] == pytest.approx(plain["loss"], rel=1e-5), "same seed, same batches, same steps"
    without = cfg.copy()
    with open_dict(without):
        del without.callbacks.lookahead
    assert plain_loop(without, warmup=1, steps=11)["loss"] != pytest.approx(plain["loss"], rel=1e-5), (
        "the plain loop must apply Lookahead's pull: without it the loss differs"
    )


def test_lab_fits_carry_no_checkpoint_callback(brisk_root, tmp_path):
    """The lab drops brisk's checkpoint callbacks; unless it also turns checkpointing off, Lightning adds its own
    ModelCheckpoint, a hook on every step the plain loop has not and a file written at each timed fit's end."""
    trainer, _, _ = build(compose_bench([*TINY, f"paths.output_dir={tmp_path}"], brisk_root))
    assert trainer.checkpoint_callback is None
    assert not [c for c in trainer.callbacks if isinstance(c, L.pytorch.callbacks.ModelCheckpoint)]


@pytest.mark.parametrize("fit", ["clocked", "speedrun"])
def test_a_stopped_lab_fit_says_the_bench_is_run_again_not_resumed(fit, brisk_root, capsys):
    """SIGTERM in one of the lab's fits (the clocked ones, and the speedrun's, which have no clock): the line says
    what is true for a bench, not brisk-train's `ckpt_path=last`, whose checkpoint is in a scratch folder."""
    import signal_at  # noqa: F401  registers sigterm_at: the fit sends itself SIGTERM after its second batch

    at = ["+callbacks.stop.type=sigterm_at", "+callbacks.stop.hook=train_batch_end", "+callbacks.stop.batch=1"]
    with pytest.raises(SystemExit) as stopped:
        if fit == "clocked":
            measure_fit(compose_bench([*TINY, *at], brisk_root), warmup=1, steps=10)
        else:
            speedrun.run_fit(speedrun_bench(brisk_root, [*at, "target_acc=0.99"]), DataCache())
    assert stopped.value.code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert (
        "brisk: interrupted by SIGTERM at global step 2 (epoch 0). A bench is not resumed: bench.json and bench.md in "
        "its run folder hold the parts it finished, if any; run brisk-bench again, with "
        "bench.run=[...] naming the parts it had left." in err
    ), err[-3000:]
    assert "ckpt_path=last" not in err


def test_speedrun_part_tables_every_row_and_keeps_the_unreached(brisk_root, capsys):
    """The ablation end to end, tiny, in process: a row that never reaches the target is in the table as not
    reached, and the cost per step comes from a like-for-like comparison."""
    bench = compose_bench([], brisk_root).bench
    spec = bench.speedrun.copy()
    with open_dict(spec):
        spec.ablation = [*TINY_SPEEDRUN, "data.val_size=200", "trainer.max_epochs=2", "target_acc=0.3"]
        spec.seeds = [0]
        # The whitening row's fit is short (4 steps an epoch): nothing below depends on how far it gets.
        spec.parts = {
            "whitening": ["model.net.whiten_init=false", "trainer.limit_train_batches=4"],
            "training": ["trainer.limit_train_batches=1"],
        }
        spec.nil = [*spec.nil, "data.synthetic.n_train=600"]
        spec.warmup, spec.steps, spec.rounds = 1, 3, 1
    planned = speedrun.plan(spec, lambda overrides, where: compose_bench(overrides, brisk_root))
    s = speedrun.compare(planned, spec, spec.rounds, DataCache())
    rows = {r["part"]: r for r in s["rows"]}
    assert list(rows) == ["all on", "whitening", "training"] and s["target"] == 0.3
    assert rows["all on"]["reached"] == 1 and 1 <= rows["all on"]["epochs"] <= 2 and rows["all on"]["steps"] > 0
    assert rows["training"]["reached"] == 0 and rows["training"]["epochs"] is None, "2 steps reach nothing"
    assert all(r["runs"][0]["test_acc"] > 0 and r["seeds"] == 1 for r in s["rows"])
    assert s["overhead"]["same_loss"] and len(s["cost_per_step"]["per_round_ms"]) == 1
    table = report.speedrun(s)
    assert "| training off | 0/1 | not reached | not reached | not reached |" in table
    assert "| all on | 1/1 |" in table and f"{s['cost_per_step']['median_ms']:.3f} ms" in table
    without = s["cost_per_step_without_fast_loop"]
    assert len(without["per_round_ms"]) == 1 and "fast_loop=false (plain Lightning" in table
    # A progress line per fit and per round of the cost per step (the part took over 4 min at load 4-5, issue 41).
    progress = [
        line.split(" at ")[0].split(", load")[0]
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("bench: ")
    ]
    assert progress == [
        "bench: speedrun fit 1/3: all on, seed 0",
        "bench: speedrun fit 2/3: whitening off, seed 0",
        "bench: speedrun fit 3/3: training off, seed 0",
        "bench: speedrun cost per step round 1/1",
        "bench: speedrun cost per step, fast_loop=false, round 1/1",
    ]


def test_breakdown_counts_what_each_component_adds(brisk_root):
    """The breakdown part end to end, small: every row timed and counted, and the report says what brisk adds."""
    overrides = list(compose_bench([], brisk_root).bench.breakdown.overrides)
    tiny = [o for o in TINY if not o.startswith("model.net.")]  # the breakdown's NilNet takes no width
    cfg = compose_bench([*tiny, *overrides], brisk_root)
    b = breakdown.compare(cfg, warmup=1, steps=3, rounds=1, data=DataCache())
    calls = [r["extra_calls_per_step"] for r in b["rows"]]
    assert len(calls) == len(breakdown.ROWS) and b["plain_calls_per_step"] > 0
    assert calls[0] > 500, "bare Lightning's loop makes hundreds of calls a step more than the plain loop"
    assert b["default_calls_over_bare_lightning"] == calls[-2] - calls[0] > 0
    assert f"adds {calls[-2] - calls[0]:.0f} calls per step" in report.breakdown(b)
    assert calls[-1] > calls[-2] + 1000, "fast_loop=false: plain Lightning makes ~3,000 calls a step more"


# Python calls a step over the plain loop at nil compute, counted at 7e40da4 (before brisk.fastloop) by this very
# measurement, `python -m brisk_lab.call_budget` (sys.setprofile: exact, whatever the load). The fast loop may
# cost at most 3% more (it cost +2.0% on the default path and +1.9% on the speedrun's when it landed).
CALLS_BEFORE = {"default": 2108.66, "speedrun": 1610.64}


def test_the_fast_loop_makes_no_more_calls_a_step_than_before_it(brisk_root):
    for path, cfg in call_budget.paths(lambda overrides: compose_bench(overrides, brisk_root)).items():
        calls = call_budget.calls_over_plain(cfg)
        assert calls <= 1.03 * CALLS_BEFORE[path], f"{path}: {calls:.0f} calls a step over the plain loop"


def test_breakdown_rows_add_one_component_each(brisk_root):
    """The lab's breakdown builds each row from brisk-train's default callbacks: the last row is exactly them."""
    bench = compose_bench([], brisk_root).bench
    cfg = compose_bench(list(bench.breakdown.overrides), brisk_root)  # as brisk-bench plans it
    default = compose_cfg([], brisk_root)
    assert cfg.model.net.type == "nil"  # nil compute: the rows show the framework's cost
    kept = []
    for _, _, _, keep, logger, _ in breakdown.ROWS:
        row = breakdown.row_config(cfg, keep, logger)
        kept.append((set(row.callbacks), bool(row.logger), row.trainer.enable_progress_bar))
    assert kept[0] == (set(), False, False)
    assert kept[3] == ({"progress_bar"}, False, True)
    # the full default, although the lab's other fits leave the checkpoint callbacks out
    assert kept[-1] == (set(default.callbacks), True, True) and cfg.callbacks.model_checkpoint is None
    assert row.callbacks == default.callbacks
    assert [len(k[0]) for k in kept] == sorted(len(k[0]) for k in kept)


def test_plain_loop_refuses_what_it_cannot_replicate(tiny_bench):
    cfg = tiny_bench.copy()
    with open_dict(cfg):
        cfg.trainer.accumulate_grad_batches = 2
    with pytest.raises(BriskError, match="accumulate_grad_batches"):
        plain_loop(cfg, warmup=1, steps=1)


def test_bad_bench_settings_are_refused_naming_the_key(tiny_bench):
    cfg = tiny_bench.copy()
    with open_dict(cfg):
        cfg.bench.run = ["pipeline", "nope"]
    with pytest.raises(BriskError, match=r"bench.run: unknown part 'nope'.*batch_size"):
        plan(cfg)
    with open_dict(cfg):
        cfg.bench.run = ["fit"]
        cfg.bench.sweep.steps = 0
    with pytest.raises(BriskError, match=r"bench.sweep.steps=0"):
        plan(cfg)
    with pytest.raises(BriskError, match=r"bench.levers.odd needs `key`"):
        levers.plan("odd", OmegaConf.create({"key": "data.batch_size"}))


def test_every_lever_value_of_every_preset_composes(brisk_root):
    """A typo in a preset's overrides would only show when that lever runs; compose them all here. An override list
    that several presets share is composed once, under the first preset that has it: a preset sets values, not keys,
    so a list that composes under one composes under all. That leaves 28 of 70 lever compositions, ~0.4 s each."""
    tiny = [o for o in TINY if not o.startswith("model.net")]  # the model lever changes the net
    composed: set[tuple[str, ...]] = set()
    for preset in (None, "quick", "gpu"):
        base = [*tiny, f"preset={preset}"] if preset else tiny
        bench = compose_bench(base, brisk_root).bench
        assert set(bench.run) <= {"pipeline", "augment", "overhead", "breakdown", "fit", "speedrun", *bench.levers}
        settings = []
        for name, spec in bench.levers.items():
            for label, overrides in levers.settings(name, spec):
                assert label, f"preset={preset}: a value of lever {name} has no label"
                settings.append((f"{name}={label}", overrides))
        settings += [(f"overhead model={m}", [f"model={m}", *bench.overhead.overrides]) for m in bench.overhead.models]
        for label, overrides in settings:
            if tuple(overrides) not in composed:
                cfg = compose_bench([*base, *overrides], brisk_root)
                assert cfg.data.batch_size > 0, f"preset={preset}: {label}"
                composed.add(tuple(overrides))
        spec = bench.speedrun.copy()
        spec.seeds = spec.seeds[:1]  # a seed changes no composition
        planned = speedrun.plan(
            spec, lambda overrides, where, base=base: compose_bench([*base, *overrides], brisk_root)
        )
        assert planned["overhead"].model.net.type == "nil"
        assert all(c.target_acc for seeds in planned["fits"].values() for c in seeds.values())
        assert set(planned["fits"]) == {speedrun.ALL_ON, *bench.speedrun.parts}


def test_speedrun_parts_null_plans_the_all_on_row_alone(brisk_root):
    """The cost per step without the ablation's rows: bench.speedrun.parts=null (a command-line {} would merge)."""
    tiny = [o for o in TINY if not o.startswith("model.net")]
    bench = compose_bench([*tiny, "bench.speedrun.parts=null", "bench.speedrun.seeds=[0]"], brisk_root).bench
    planned = speedrun.plan(bench.speedrun, lambda overrides, where: compose_bench(overrides, brisk_root))
    assert list(planned["fits"]) == [speedrun.ALL_ON] and planned["rows"] == {speedrun.ALL_ON: []}


@pytest.mark.slow  # the whole lab end to end (~40 s); its parts are tested in process above
def test_cli_writes_json_table_and_plots(brisk_root):
    # A lever of its own, run in a child process like the devices lever, to cover that path too.
    child = "+bench.levers.child={subprocess: true, key: data.batch_size, values: [50]}"
    args = [
        *TINY,
        "bench.run=[pipeline,overhead,batch_size,child]",
        "bench.rounds=1",
        "bench.overhead.models=[simple_cnn]",
        "bench.overhead.overrides=[]",
        "bench.overhead.steps=2",
        "bench.overhead.warmup=1",
        "bench.sweep.steps=2",
        "bench.sweep.warmup=1",
        "bench.levers.batch_size.values=[50,100]",
        child,
    ]
    proc = run_cli("bench", args, brisk_root, package="brisk_lab")  # python -m brisk_lab.bench
    run_dir = run_dir_of(proc)
    result = json.loads((run_dir / "bench.json").read_text())
    parts = result["parts"]
    assert set(parts) == {"pipeline", "overhead", "batch_size", "child"}
    p = parts["pipeline"]
    assert p["brisk_resident_images_per_sec"] > 0 and "loaded" in p
    assert p["images"] == 1500 and p["ratio"] == pytest.approx(p["brisk_images_per_sec"] / p["classic_images_per_sec"])
    o = parts["overhead"]["simple_cnn"]
    assert o["same_loss"] and o["batch_size"] == 100 and o["plain_images_per_sec"] > 0 and "extra_ms_per_step" in o
    rows = parts["batch_size"]["rows"]
    assert [r["label"] for r in rows] == ["50", "100"] and [r["batch_size"] for r in rows] == [50, 100]
    assert [r["epoch_batches"] for r in rows] == [30, 15]  # 1,500 training images
    assert parts["child"]["rows"][0]["images_per_sec"] > 0
    assert (run_dir / "levers" / "child" / "50-0" / "bench.json").is_file()
    table = (run_dir / "bench.md").read_text()
    assert "| classic: PIL per sample, 2 DataLoader workers |" in table and "| 100 |" in table
    assert table.strip() in proc.stdout
    sections = ["### Input pipeline", "### Framework overhead", "### Lever: batch_size", "### Lever: child"]
    assert [table.index(s) for s in sections] == sorted(table.index(s) for s in sections), "in the order of bench.run"
    for name in parts:
        png = (run_dir / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert result["machine"]["cpu_count"] >= 1 and result["command"].startswith("brisk-bench data=synthetic")


def test_an_entry_point_of_its_own_checks_its_groups_and_those_of_brisk():
    """brisk-bench composes from the lab's conf/ with brisk's on its search path: options of both are options."""
    assert unknown_group_option(["model=nil", "preset=quick", "optimizer=sgd"], CONFIG_PATH) is None
    assert "no such option" in unknown_group_option(["preset=nope"], CONFIG_PATH)


def test_gpu_bench_script_skips_itself_without_cuda(tmp_path):
    """No GPU visible (hidden here even on a GPU machine): exit 0, one line saying why, and no output folder."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "gpu_bench"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        ["bash", str(root / "scripts" / "gpu_bench.sh"), str(out)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and "skipped: no CUDA GPU" in proc.stderr, proc.stderr
    assert not out.exists()
