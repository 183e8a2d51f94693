"""brisk's Hydra configs, a package so that packages built on brisk reach them as `pkg://brisk.conf`:
the lab's bench.yaml puts them on its search path."""

from pathlib import Path

# The folder itself, links resolved (in a checkout src/brisk/conf links to the top-level conf/).
CONFIG_PATH = str(Path(__file__).resolve().parent)
