"""What the entry points share: where the configs are, and user errors printed without a traceback wall."""

from __future__ import annotations

import functools
import logging
import re
import signal
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from brisk import distributed
from brisk.errors import BriskError

CONFIG_PATH = str(Path(__file__).resolve().parents[2] / "conf")
# ${brisk_run_id:} in conf/hydra/default.yaml: the run directory's name, shared by all ranks of a job.
OmegaConf.register_new_resolver("brisk_run_id", distributed.run_id, use_cache=True, replace=True)
log = logging.getLogger("brisk")


def user_errors(task):
    """Turn a BriskError into one line on stderr and exit status 2; end the job's ranks either way."""

    @functools.wraps(task)
    def wrapper(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        except BriskError as e:
            print(f"brisk: error: {e}", file=sys.stderr, flush=True)
            if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
                raise  # the sweep records this job as failed and goes on (brisk.sweep.SweepSummary)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C outside a Trainer stage (inside one, SigtermCheckpoint stops cleanly)
            distributed.stop()
            print("brisk: interrupted", file=sys.stderr, flush=True)
            sys.exit(128 + signal.SIGINT)
        finally:
            distributed.finish()

    return wrapper


def _numeric_groups() -> set[str]:
    """Config groups that have an option named by a number, such as precision=32 or accumulation=4."""
    return {p.parent.name for p in Path(CONFIG_PATH).glob("*/*.yaml") if p.stem.isdigit()}


def quote_group_options(args: list[str]) -> list[str]:
    """Quote numeric group options: Hydra parses `accumulation=4` as the int 4, which it refuses as an option name.

    `accumulation=4` -> `accumulation='4'`, `precision=32,bf16-mixed` -> `precision='32','bf16-mixed'`,
    so the command line reads as the docs say. Anything else passes unchanged.
    """
    groups = _numeric_groups()
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key in groups and re.fullmatch(r"[\w.-]+(,[\w.-]+)*", value):
            arg = f"{key}=" + ",".join(f"'{v}'" for v in value.split(","))
        out.append(arg)
    return out


def hydra_entry(hydra_main):
    """A console-script entry point around a @hydra.main function, with numeric group options quoted."""

    @functools.wraps(hydra_main)
    def entry() -> None:
        sys.argv[1:] = quote_group_options(sys.argv[1:])
        hydra_main()

    return entry


def entry_point(config_name: str):
    """The decorator of every console script: Hydra with conf/<config_name>.yaml, numeric group options quoted,
    user errors as one line."""

    def wrap(task):
        import hydra

        hydra_main = hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name=config_name)
        # Recorded here, in the process the user started: a DDP job's ranks start this entry point again.
        program = distributed.entry_program(task.__module__)
        return hydra_entry(hydra_main(distributed.started_as(program, user_errors(task))))

    return wrap
