"""brisk-bench: the speed lab. Measures what each training lever costs, writes bench.json, bench.md and plots."""

from __future__ import annotations

from omegaconf import DictConfig

from brisk.cli import entry_point
from brisk.lab.run import run


@entry_point("bench")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
