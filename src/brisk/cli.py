"""What the entry points share: where the configs are, and user errors printed without a traceback wall."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import re
import signal
import sys
import unittest.mock
from pathlib import Path

from omegaconf import OmegaConf

from brisk import compat
from brisk.conf import CONFIG_PATH
from brisk.errors import BriskError, refuse
from brisk.registry import import_modules
from brisk.run import entry, rundir
from brisk.utils import ranks
from brisk.utils.quiet import quiet


def register_resolvers() -> None:
    """${brisk_run_id:} in conf/hydra/default.yaml: the run directory's name, shared by all ranks of a job.
    Registered when an entry point starts, so importing brisk (to load a model, say) registers nothing."""
    OmegaConf.register_new_resolver("brisk_run_id", entry.run_id, use_cache=True, replace=True)


log = logging.getLogger("brisk")


def user_errors(task):
    """The task's one choke point for user errors: a BriskError, or anything `brisk.utils.explain` knows (what
    Hydra wrapped from a constructor, a config value that cannot be resolved), or running out of memory, becomes
    one line on stderr and exit status 2. Ctrl-C becomes "interrupted" and 130. The job's ranks end either way.
    The run directory is locked for the task, and removed again if this invocation created it and the run
    stopped before it started (brisk.run.rundir): refused, interrupted, or ended by a bug, whose traceback stays."""

    # A task that takes `run` is handed the run directory's record, to mark when the run really starts.
    wants_run = "run" in inspect.signature(task).parameters

    @functools.wraps(task)
    def wrapper(cfg, *args, **kwargs):
        run, job = None, rundir.Job.of_hydra()  # what the task's steps need from Hydra, read once
        try:
            ranks.guard()  # in a rank of a DDP job (brisk.run.elastic): it dies with the job
            run = rundir.Run(job)
            import_modules(cfg.get("imports"))  # the user's own classes register before anything is built
            result = task(cfg, *args, run=run, **kwargs) if wants_run else task(cfg, *args, **kwargs)
            run.start(cfg)  # entry points that do not mark the start themselves are recorded when done
            ranks.leave_process_group()  # done: a DDP rank's group goes now, not at the interpreter's exit
            return result
        except KeyboardInterrupt as e:  # Ctrl-C outside a Trainer stage (inside one, SigtermCheckpoint stops cleanly)
            interrupted(run, e)
        except SystemExit as e:
            if not compat.stopped_for_ctrl_c(e):
                raise
            interrupted(run, e.__context__)  # inside a stage, before brisk's handler took over: Lightning said exit 1
        except Exception as e:
            from brisk.utils.explain import explain  # only once something went wrong: a run that works never needs it

            # the overrides as typed: one that holds ${...} may be the very error
            error = explain(e, list(job.overrides) if job else []) or out_of_memory(e, cfg)
            if run is not None:
                run.refused()
            if error is None:
                raise  # a bug: its traceback is the report
            if job is not None and job.multirun:
                print(f"brisk: error: {error}", file=sys.stderr, flush=True)
                raise error from None  # the sweep records it as failed and goes on (brisk.search.SweepSummary)
            refuse(error)
        finally:
            if run is not None:
                run.close()

    return wrapper


def interrupted(run: rundir.Run | None = None, e: BaseException | None = None) -> None:
    """Ctrl-C outside training (or, in a launcher's worker, SIGTERM: brisk.run.jobs.Interrupted): nothing to checkpoint.
    Exit 128 + the signal."""
    signum = getattr(e, "signum", signal.SIGINT)
    if run is not None:
        run.refused()  # a run stopped before it started leaves no directory
    name = signal.Signals(signum).name
    print(f"brisk: interrupted by {name} outside training; no checkpoint written", file=sys.stderr, flush=True)
    sys.exit(128 + signum)


def out_of_memory(e: BaseException, cfg) -> BriskError | None:
    """The one line for running out of memory (host or device), or None for any other error."""
    from lightning.pytorch.utilities.memory import is_oom_error

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


# Command-line options that add config folders of the user's own.
USER_CONFIG = ("--config-dir", "-cd", "hydra.searchpath", "+hydra.searchpath")


def config_folders(args: list[str], primary: str = CONFIG_PATH) -> tuple[str, ...] | None:
    """The folders Hydra takes config groups from: the entry point's own and brisk's conf/ (which a package built
    on brisk puts on its search path), or an absolute `--config-path`/`-cp` given instead. None where the command
    line adds folders only Hydra can find: --config-dir, hydra.searchpath, or a relative -cp (Hydra reads it
    relative to the entry point's module, not to the current folder)."""
    if any(a.startswith(USER_CONFIG) for a in args):
        return None
    for i, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name in ("--config-path", "-cp"):
            given = value if sep else (args[i + 1] if i + 1 < len(args) else "")
            return (given,) if Path(given).is_absolute() else None
    return tuple(dict.fromkeys((primary, CONFIG_PATH)))


@functools.cache  # the lab quotes every lever's overrides: read the folder once
def _numeric_groups(conf: str) -> frozenset[str]:
    """Config groups that have an option named by a number, such as precision=32 or accumulation=4."""
    return frozenset(p.parent.name for p in Path(conf).glob("*/*.yaml") if p.stem.isdigit())


def quote_group_options(args: list[str], primary: str = CONFIG_PATH) -> list[str]:
    """Quote numeric group options: Hydra parses `accumulation=4` as the int 4, which it refuses as an option name.

    `accumulation=4` -> `accumulation='4'`, `precision=32,bf16-mixed` -> `precision='32','bf16-mixed'`,
    so the command line reads as the docs say. Anything else passes unchanged.
    """
    groups = frozenset().union(*map(_numeric_groups, config_folders(args, primary) or (primary,)))
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


def unknown_group_option(args: list[str], primary: str = CONFIG_PATH) -> str | None:
    """The error for a `group=option` (or a list or sweep of options) that names no file of <conf>/<group>/."""
    folders = config_folders(args, primary)
    if folders is None:
        return None  # the user's own config folders may add options: Hydra composes and says what is missing
    for arg in args:
        key, sep, value = arg.partition("=")
        groups = [Path(f) / key.lstrip("+~") for f in folders]
        if not sep or "(" in value or "/" in key or not key.lstrip("+~").isidentifier():
            continue  # Hydra's own, or a sweep function such as choice(...)
        if not (found := [g for g in groups if g.is_dir()]):
            continue  # a plain key, not a group
        group = found[0]
        options = sorted({p.stem for g in found for p in g.glob("*.yaml")})
        for name in value.strip("[]").split(","):
            name = name.strip().strip("'\"")
            if name == "null" and not key.startswith("~"):  # Hydra: a ValueError with a traceback
                return (
                    f"{key}=null: a config group takes one of its options, not null. Choose one of: "
                    f"{', '.join(options)} (files in {group}), or leave {key} out for its default."
                )
            if name and name != "null" and name not in options:
                return f"{key}={name}: no such option. Choose one of: {', '.join(options)} (files in {group})."
    return None


def hydra_entry(hydra_main, primary: str = CONFIG_PATH):
    """A console-script entry point around a @hydra.main function, with numeric group options quoted: the choke
    point for what goes wrong outside the task (the command line, composing the config, the run directory's
    checks), which ends as one `brisk: error:` line and exit status 2. Errors it does not know keep their
    traceback."""

    @functools.wraps(hydra_main)
    def entry() -> None:
        register_resolvers()
        quiet()  # Lightning's tips and the warnings known to be harmless (brisk.utils.quiet)
        # Hydra's argparse takes -m only before the overrides: `data=synthetic -m seed=1,2` would be "unrecognized
        # arguments: seed=1,2"
        args = sorted(sys.argv[1:], key=lambda a: a not in ("-m", "--multirun"))
        if error := not_utf8(args) or unknown_group_option(args, primary):
            refuse(error)
        sys.argv[1:] = quote_group_options(args, primary)
        try:
            with hydra_raises():
                hydra_main()
        except KeyboardInterrupt:  # while Hydra composes, before any task
            interrupted()
        except Exception as e:
            from brisk.utils.explain import explain

            if (error := explain(e, overrides=args, folders=config_folders(args, primary) or (primary,))) is None:
                raise
            refuse(error)

    return entry


def hydra_raises():
    """Hydra raises what goes wrong instead of printing it in several lines and exiting 1.

    hydra._internal.utils.run_and_report does that for every error unless HYDRA_FULL_ERROR=1 (its documented
    switch for a full traceback), which is also the only way to get the exception itself. Put back afterwards:
    tests run entry points in one process."""
    return unittest.mock.patch.dict(os.environ, {"HYDRA_FULL_ERROR": "1"})


def entry_point(config_name: str, config_path: str = CONFIG_PATH):
    """The decorator of every console script: Hydra with <config_path>/<config_name>.yaml (brisk's conf/ unless
    a package built on brisk names its own), numeric group options quoted, user errors as one line."""

    def wrap(task):
        import hydra

        hydra_main = hydra.main(version_base="1.3", config_path=config_path, config_name=config_name)
        # Recorded here, in the process the user started: a DDP job's ranks start this entry point again.
        program = entry.entry_program(task.__module__)
        return hydra_entry(hydra_main(entry.started_as(program, user_errors(task))), config_path)

    return wrap
