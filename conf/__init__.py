"""brisk's Hydra configs, a package so that packages built on brisk reach them as `pkg://brisk.conf`:
the lab's bench.yaml puts them on its search path."""

from pathlib import Path

# The folder itself, links resolved (in a checkout src/brisk/conf links to the top-level conf/).
CONFIG_PATH = str(Path(__file__).resolve().parent)


def _store_schemas() -> None:
    # Every config brisk composes starts from these (brisk.run.schemas): stored before any entry point, test or lab
    # composes one, since each reaches the configs through CONFIG_PATH.
    from brisk.run.schemas import store

    store()


_store_schemas()
