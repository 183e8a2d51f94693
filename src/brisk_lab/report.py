"""bench.md: the lab's results as Markdown tables, one per part."""

from __future__ import annotations

from typing import Any

from brisk import table_cell
from brisk_lab.stats import round_ratios

# A ratio column holds the median of the rounds' own ratios (stats.paired_ratio), which can differ from the ratio of
# the medians beside it (medians of 197 and 176 images/s, 0.89, beside a round median of 0.976 in one quick-preset
# run); the header says so, and the rounds are printed.
MEDIAN_OF_ROUNDS = "median of round ratios"


def _rounds(numerator: list[float], denominator: list[float], fmt: str) -> str:
    return ", ".join(format(r, fmt) for r in round_ratios(numerator, denominator))


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}"


def _x(ratio: float) -> str:
    return f"{ratio:.1f}x"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = [
        "| " + " | ".join(map(table_cell, header)) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    return "\n".join(lines + ["| " + " | ".join(map(table_cell, r)) + " |" for r in rows])


def pipeline(p: dict[str, Any]) -> str:
    aug = ", ".join(f"{k}={v}" for k, v in p["augment"].items())
    head = (
        f"### Input pipeline\n\n{p['images']:,} images, batch {p['batch_size']}, augment {aug} + normalize, "
        f"delivered as float batches on {p['device']}; median of {len(p['rounds']['brisk'])} interleaved passes.\n"
    )

    def each(side: dict, name: str) -> str:  # the rounds a ratio is the median of
        return _rounds(side["rounds"][name], side["rounds"]["classic"], ".1f")

    rows = [
        [f"classic: PIL per sample, {p['workers']} DataLoader workers", _n(p["classic_images_per_sec"]), "1.0x", ""],
        ["brisk: uint8 tensor, batched ops", _n(p["brisk_images_per_sec"]), f"**{p['ratio']:.1f}x**", each(p, "brisk")],
        [
            f"brisk, data.resident on {p['device']}",
            _n(p["brisk_resident_images_per_sec"]),
            _x(p["resident_ratio"]),
            each(p, "brisk_resident"),
        ],
    ]
    load = p.get("loaded")
    if load:
        head += (
            f"Loaded: the same again with {load['busy_processes']} busy-loop processes on the cores (load average "
            f"{load['load_average']}); brisk runs its batch ops on one torch thread (brisk.utils.threads).\n"
        )
        rows += [
            [f"loaded, classic: {p['workers']} DataLoader workers", _n(load["classic_images_per_sec"]), "1.0x", ""],
            ["loaded, brisk", _n(load["brisk_images_per_sec"]), f"**{load['ratio']:.1f}x**", each(load, "brisk")],
            [
                "loaded, brisk, data.resident",
                _n(load["brisk_resident_images_per_sec"]),
                _x(load["resident_ratio"]),
                each(load, "brisk_resident"),
            ],
            [
                f"loaded, brisk with torch's {load['default_threads']} threads for its batch ops",
                _n(load["brisk_default_threads_images_per_sec"]),
                f"{load['default_threads_ratio']:.1f}x",
                each(load, "brisk_default_threads"),
            ],
        ]
    header = ["pipeline", "images/s (median)", f"vs classic ({MEDIAN_OF_ROUNDS})", "round ratios"]
    return head + "\n" + _table(header, rows)


def augment(a: dict[str, Any]) -> str:
    head = (
        f"### Augmentation cost\n\nOne batch of {a['batch_size']} uint8 {a['image_size']}x{a['image_size']} images "
        "through `prepare_batch` (augment + normalize; then mixup or cutmix, with the labels) "
        f"on {a['device']}, {a['torch_threads']} torch threads; "
        f"ms per batch, median of {len(next(iter(a['rounds'].values())))} interleaved rounds of {a['repeats']} "
        "batches. `none` is normalization alone.\n"
    )
    rows = [
        [
            f"`augment={r['option']}`",
            ", ".join(f"{k}={v}" for k, v in r["augment"].items()) or "-",
            _n(r["ms_per_batch"], 1),
            f"{r['over_none_ms']:+.1f}",
            f"{r['over_standard_ms']:+.1f}",
            f"{r['spread']:.0%}",
        ]
        for r in a["rows"]
    ]
    header = ["option", "on", "ms/batch", "vs none", "vs standard", "spread"]
    return head + "\n" + _table(header, rows)


def overhead(o: dict[str, dict]) -> str:
    any_model = next(iter(o.values()))
    head = (
        f"### Framework overhead\n\nA brisk fit (Lightning Trainer with brisk's callbacks, logger and progress bar) "
        f"against a plain PyTorch loop doing the same work; {any_model['steps']} steps from the same seed, "
        f"images/s over the steps after the warm-up, median of {len(any_model['rounds']['brisk'])} "
        "interleaved rounds. brisk / plain is the median of each round's brisk / plain (listed in round order), "
        "not the ratio of the two medians: both sides of a round share the machine's state.\n"
    )

    def each(r: dict) -> str:  # each round's brisk / plain, in round order
        rates = {side: [run["images_per_sec"] for run in r["rounds"][side]] for side in ("brisk", "plain")}
        return _rounds(rates["brisk"], rates["plain"], ".3f")

    rows = [
        [
            model,
            str(r["batch_size"]),
            r["precision"],
            _n(r["plain_images_per_sec"]),
            _n(r["brisk_images_per_sec"]),
            f"**{r['ratio']:.3f}**",
            each(r),
            _n(r["extra_ms_per_step"], 1),
            f"{r['loss_plain']:.6f} / {r['loss_brisk']:.6f}" + ("" if r["same_loss"] else " (differ)"),
            _n(r["brisk_fixed_s"], 1),
        ]
        for model, r in o.items()
    ]
    header = [
        "model",
        "batch",
        "precision",
        "plain images/s (median)",
        "brisk images/s (median)",
        f"brisk / plain ({MEDIAN_OF_ROUNDS})",
        "round ratios",
        "extra ms/step",
        "loss plain / brisk",
        "fit setup s",
    ]
    return head + "\n" + _table(header, rows)


def breakdown(b: dict[str, Any]) -> str:
    head = (
        f"### Cost per step, by component\n\nA fit at nil compute (batch {b['batch_size']}, see bench.breakdown), "
        f"built up one component per row; each row against the plain loop ({b['plain_ms_per_step']:.2f} ms/step) "
        f"in the same round, {b['steps']} steps timed, median of {b['rounds']} interleaved rounds. Calls: the "
        f"function calls per step over the plain loop's {b['plain_calls_per_step']:.0f} (Python and built-in, "
        f"counted over {b['call_steps']} steps), which, unlike the clock, read the same on every run. brisk's "
        f"default adds {b['default_calls_over_bare_lightning']:.0f} calls per step to bare Lightning.\n"
    )
    rows = [
        [
            r["label"],
            f"{r['extra_ms_per_step']:.3f}",
            f"{r['adds_ms']:+.3f}",
            f"{r['spread_ms']:.3f}",
            f"{r['extra_calls_per_step']:.0f}",
            f"{r['adds_calls']:+.0f}",
        ]
        for r in b["rows"]
    ]
    header = ["fit", "ms/step over the plain loop", "adds", "spread (max - min)", "calls/step over plain", "adds"]
    return head + "\n" + _table(header, rows)


def fit(r: dict[str, Any], base: str) -> str:
    head = f"### One fit\n\n{base}; {r['batches']} batches timed after the warm-up, {r['world_size']} process(es).\n"
    header = [
        "images/s",
        "ms/batch",
        "epoch s",
        f"{r['memory']} MB",
        "added MB",
        "first step s",
        "fit setup s",
        "last loss",
    ]
    cells = [
        _n(r["images_per_sec"]),
        _n(r["batch_s"] * 1e3, 1),
        _n(r["epoch_s"], 1),
        _n(r["peak_mb"]),
        _n(r["added_mb"]),
    ]
    cells += [_n(r["first_step_s"], 2), _n(r["fixed_s"], 1), f"{r['loss']:.4f}"]
    return head + "\n" + _table(header, [cells])


def _varies(rows: list[dict], key: str) -> bool:
    return len({round(r.get(key) or 0, 6) for r in rows}) > 1


def lever(name: str, result: dict, base: str) -> str:
    rows = result["rows"]
    memory = rows[0]["memory"]
    header = [name, "images/s", "ms/batch", "epoch s", f"{memory} MB", "added MB", "speed"]
    extra = [k for k in ("params", "gflops_per_image") if _varies(rows, k)]
    extra += ["compile_s"] if any("compile_s" in r for r in rows) else []
    titles = {"params": "params (M)", "gflops_per_image": "GFLOPs/image (fwd)", "compile_s": "compile s"}
    header += [titles[k] for k in extra]
    first = rows[0]["images_per_sec"]
    table = []
    for r in rows:
        cells = [r["label"], _n(r["images_per_sec"]), _n(r["batch_s"] * 1e3, 1), _n(r["epoch_s"], 1)]
        cells += [_n(r["peak_mb"]), _n(r["added_mb"])]
        cells.append(f"{r['images_per_sec'] / first:.2f}x")
        for k in extra:
            value = r.get(k)
            cells.append(_n(value / 1e6 if k == "params" and value else value, 2))
        table.append(cells)
    if "reference" in result:
        ref = result["reference"]
        table.append([f"*{ref['label']}*", f"*{_n(ref['images_per_sec'])}*", *([""] * (len(header) - 2))])
    rounds = result["rounds"]
    timed = f"{result['batches']} batches timed after the warm-up" + (
        f", median of {rounds} rounds" if rounds > 1 else ""
    )
    head = f"### Lever: {name}\n\nBase: {base}. {timed}; epoch s = batches per epoch x s/batch.\n"
    return head + "\n" + _table(header, table)


def _median_range(row: dict, key: str, digits: int) -> str:
    if row[key] is None:
        return "not reached"
    low, high = row[f"{key}_range"]
    return f"{row[key]:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


def _without_fast_loop(c: dict | None) -> str:
    if not c:
        return ""
    low, high = c["range_ms"]
    return (
        f" With fast_loop=false (plain Lightning, brisk.fastloop off), measured the same way just after: "
        f"**{c['median_ms']:.3f} ms**"
        f" per step (rounds {low:.3f} to {high:.3f})."
    )


def speedrun(s: dict[str, Any]) -> str:
    seeds = s["rows"][0]["seeds"]
    head = (
        f"### experiment=speedrun: what each part buys\n\nEach row switches one part of the recipe off (all others "
        f"on), {seeds} seeds each, on `{' '.join(s['ablation'])}`. To val/acc >= {s['target']}: the first validation "
        "at or over it, median over the seeds that reached it (min-max); seconds on the time-to-accuracy clock "
        "(training steps and whitening). On a CPU the epochs and steps are what carries over; the seconds are "
        "CPU seconds, not GPU seconds. Test acc: the final test with the row's TTA, median of all seeds.\n"
    )
    rows = [
        [
            r["part"] if r["part"] == "all on" else f"{r['part']} off",
            f"{r['reached']}/{r['seeds']}",
            _median_range(r, "epochs", 0),
            _median_range(r, "steps", 0),
            _median_range(r, "seconds", 1),
            f"{r['test_acc']:.4f}",
        ]
        for r in s["rows"]
    ]
    header = ["recipe", "reached", "in epoch", "steps to target", "seconds to target", "test acc (TTA)"]
    o, c = s["overhead"], s["cost_per_step"]
    low, high = c["range_ms"]
    verdict = "within" if c["median_ms"] <= c["target_ms"] else "over"
    cost = (
        "\n\n### experiment=speedrun: brisk's cost per step\n\nThe recipe's path at nil compute "
        f"(bench.speedrun.nil: batch {o['batch_size']}, {o['precision']}), a brisk fit against the plain loop "
        "doing the same work, "
        f"{o['steps']} steps from the same seed, {len(c['per_round_ms'])} interleaved rounds: brisk adds "
        f"**{c['median_ms']:.3f} ms** per step (median; rounds {low:.3f} to {high:.3f}), {verdict} the "
        f"{c['target_ms']} ms target. Plain loop {_n(o['plain_images_per_sec'])} images/s, brisk "
        f"{_n(o['brisk_images_per_sec'])}; loss plain / brisk {o['loss_plain']:.6f} / {o['loss_brisk']:.6f}"
        + ("" if o["same_loss"] else " (differ: the comparison is not like for like)")
        + "."
        + _without_fast_loop(s.get("cost_per_step_without_fast_loop"))
        + "\n"
    )
    return head + "\n" + _table(header, rows) + cost
