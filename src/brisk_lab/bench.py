"""brisk-bench: the speed lab. Measures what each training lever costs, writes bench.json, bench.md and plots."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from brisk import entry_point
from brisk_lab.run import run

# The lab's own config folder: bench.yaml and the lab's groups; bench.yaml reaches brisk's conf/ for the rest.
CONFIG_PATH = str(Path(__file__).resolve().parent / "conf")


@entry_point("bench", config_path=CONFIG_PATH)
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
