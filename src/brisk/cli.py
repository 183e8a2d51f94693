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

from brisk import distributed, rundir
from brisk.errors import BriskError

# brisk/conf links to the repo's top-level conf/ (a source checkout, an editable install); a wheel holds a copy
# there. Resolved, so a checkout's commands name conf/ itself.
CONFIG_PATH = str((Path(__file__).resolve().parent / "conf").resolve())
# ${brisk_run_id:} in conf/hydra/default.yaml: the run directory's name, shared by all ranks of a job.
OmegaConf.register_new_resolver("brisk_run_id", distributed.run_id, use_cache=True, replace=True)
log = logging.getLogger("brisk")


def user_errors(task):
    """Turn a BriskError (or running out of memory) into one line on stderr and exit status 2; end the
    job's ranks either way. The run directory is locked for the task, and removed again if the run was
    refused before it started and this invocation created it (brisk.rundir)."""

    @functools.wraps(task)
    def wrapper(cfg, *args, **kwargs):
        run = None
        try:
            run = rundir.Run()
            result = task(cfg, *args, **kwargs)
            run.start(cfg)  # entry points that do not mark the start themselves are recorded when done
            return result
        except (BriskError, MemoryError, RuntimeError) as e:
            error = e if isinstance(e, BriskError) else out_of_memory(e, cfg)
            if error is None:
                raise
            print(f"brisk: error: {error}", file=sys.stderr, flush=True)
            if run is not None:
                run.refused()
            if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
                raise error from None  # the sweep records this job as failed and goes on (brisk.sweep.SweepSummary)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C outside a Trainer stage (inside one, SigtermCheckpoint stops cleanly)
            distributed.stop()
            print("brisk: interrupted", file=sys.stderr, flush=True)
            sys.exit(128 + signal.SIGINT)
        finally:
            distributed.finish()
            if run is not None:
                run.close()

    return wrapper


def out_of_memory(e: BaseException, cfg) -> BriskError | None:
    """The one line for running out of memory (host or device), or None for any other error."""
    from lightning.pytorch.utilities.memory import is_oom_error  # here: the CLI module stays light to import

    if not (isinstance(e, MemoryError) or is_oom_error(e)):  # Lightning's test: CUDA, cuDNN and the CPU allocator
        return None
    text = str(e)
    batch = OmegaConf.select(cfg, "data.batch_size", default=None)
    smaller = batch // 2 if isinstance(batch, int) and batch > 1 else "<smaller>"
    return BriskError(
        f"out of {'GPU' if 'CUDA' in text else 'host'} memory with data.batch_size={batch}. Use a smaller batch, "
        f"e.g. data.batch_size={smaller} (with accumulation=2 to keep the effective batch), a smaller model, "
        "or precision=bf16-mixed."
    )


@functools.cache  # the lab quotes every lever's overrides: read the folder once
def _numeric_groups() -> frozenset[str]:
    """Config groups that have an option named by a number, such as precision=32 or accumulation=4."""
    return frozenset(p.parent.name for p in Path(CONFIG_PATH).glob("*/*.yaml") if p.stem.isdigit())


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


def not_utf8(args: list[str]) -> str | None:
    """Hydra's override parser rejects the characters Python uses for bytes that are not UTF-8 (a traceback)."""
    for arg in args:
        if any("\udc80" <= c <= "\udcff" for c in arg):
            key = arg.partition("=")[0]
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            return (
                f"{shown}: the value of {key} is not UTF-8 text, which Hydra's command line cannot take. "
                "Rename the file or folder, or point at it through a symbolic link with a UTF-8 name."
            )
    return None


def unknown_group_option(args: list[str]) -> str | None:
    """The error for a `group=option` (or a list or sweep of options) that names no file of conf/<group>/."""
    conf = Path(CONFIG_PATH)
    if any(a.startswith(("--config-dir", "-cd", "hydra.searchpath", "+hydra.searchpath")) for a in args):
        return None  # the user's own config folders may add options: Hydra composes and says what is missing
    for arg in args:
        key, sep, value = arg.partition("=")
        group = conf / key.lstrip("+~")
        if not sep or "(" in value or "/" in key or not key.lstrip("+~").isidentifier() or not group.is_dir():
            continue  # not a group of brisk's (Hydra's own, a plain key) or a sweep function such as choice(...)
        options = sorted(p.stem for p in group.glob("*.yaml"))
        for name in value.strip("[]").split(","):
            name = name.strip().strip("'\"")
            if name and name != "null" and name not in options:
                return f"{key}={name}: no such option. Choose one of: {', '.join(options)} (files in {group})."
    return None


def hydra_entry(hydra_main):
    """A console-script entry point around a @hydra.main function, with numeric group options quoted."""

    @functools.wraps(hydra_main)
    def entry() -> None:
        if error := not_utf8(sys.argv[1:]) or unknown_group_option(sys.argv[1:]):
            print(f"brisk: error: {error}", file=sys.stderr, flush=True)
            sys.exit(2)  # Hydra would say it in many lines, with exit status 1
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
