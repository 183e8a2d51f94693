"""Python calls per training step over the plain loop, at nil compute, on brisk-train's default path and on the
speedrun's: the figures docs/measurements.md gives for brisk.fastloop, and tests/project/test_bench.py's budget.

    python -m brisk_lab.call_budget                      # the fast loop, as brisk-train runs
    python -m brisk_lab.call_budget fast_loop=false      # plain Lightning

A count, not a clock (brisk_lab.clock.CallCount): it reads the same on every run, whatever the load. The data is
a small generated set (2,000 images), the breakdown's and the speedrun part's own overrides on top.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import lightning as L
from omegaconf import DictConfig

from brisk import build
from brisk_lab import breakdown, speedrun
from brisk_lab.fit import DataCache, timed_fit, with_clock
from brisk_lab.plain import plain_loop

WARMUP, STEPS = 5, 50
SMALL = ["data=synthetic", "data.synthetic.n_train=2000", "data.synthetic.n_test=500", "data.val_size=500"]
SMALL += ["data.batch_size=100", "trainer.accelerator=cpu", "trainer.devices=1", "trainer.enable_model_summary=false"]
SMALL += ["trainer.log_every_n_steps=5"]


def paths(compose: Callable[[list[str]], DictConfig], extra: list[str] = ()) -> dict[str, DictConfig]:
    """The default path (the breakdown's last brisk-train row) and the speedrun's nil path, composed by `compose`."""
    bench = compose([*SMALL, *extra]).bench
    default = breakdown.row_config(compose([*SMALL, *bench.breakdown.overrides, *extra]), None, True)
    spec = bench.speedrun.copy()
    spec.seeds = spec.seeds[:1]  # a seed changes no composition
    fast = speedrun.plan(spec, lambda overrides, where: compose([*SMALL, *overrides, *extra]))["overhead"]
    return {"default": default, "speedrun": fast}


def calls_over_plain(cfg: DictConfig) -> float:
    """A brisk fit's calls a step minus the plain loop's, each counted over STEPS steps after WARMUP."""
    plain = plain_loop(cfg, WARMUP, STEPS, count_calls=True, data=DataCache())["calls_per_step"]
    counted = with_clock(cfg, WARMUP, STEPS, count_calls=True)
    L.seed_everything(counted.seed, workers=True, verbose=False)
    return timed_fit(*build(counted))["calls_per_step"] - plain


def main() -> None:
    import tempfile

    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from brisk import quote_group_options
    from brisk_lab.bench import CONFIG_PATH

    with tempfile.TemporaryDirectory(prefix="brisk-call-budget-") as scratch:

        def composed(overrides: list[str]) -> DictConfig:
            with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
                cfg = compose("bench", overrides=quote_group_options([f"paths.root_dir={scratch}", *overrides]))
            with open_dict(cfg):
                cfg.paths.output_dir = scratch  # no Hydra run here: where its checkpoints and logs go
            return cfg

        for name, cfg in paths(composed, sys.argv[1:]).items():
            print(f"{name}: {calls_over_plain(cfg):,.0f} calls a step over the plain loop", flush=True)


if __name__ == "__main__":
    main()
