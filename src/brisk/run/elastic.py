"""A DDP job's ranks on this node, started by TorchElastic's agent.

The job process trains nothing: its agent (`elastic_launch`) starts each rank with this job's entry point, config and
overrides again, in run mode, in the job's run directory (brisk.run.entry.rank_args), and waits for them. Lightning sees
TorchElasticEnvironment in the ranks and starts no more. Measured with torch 2.14.1 and lightning 2.6.6: a command
entrypoint works under Hydra's basic, joblib and submitit_local launchers (a callable fails under joblib); the agent
starts each rank in a session of its own, so after SIGKILL of the job a rank trains on unless it set PR_SET_PDEATHSIG
itself (brisk.utils.ranks.guard); a command returns nothing to the agent, so rank 0's result comes back in summary.json.
Rank 0's stdout is the console's (a terminal keeps its live progress bar; the run directory stays the last line), its
stderr goes to a file that the agent copies to the console as it grows, so the job reads what rank 0 said before it says
anything itself; the other ranks write to files only. The files: <run>/ranks/<id>/attempt_0/<rank>/. A trial of an
Optuna search goes to the ranks as data (brisk.search.report.ENV), and a pruned one comes back as a file that rank 0
writes (report.PRUNED): its exit code and its lines would say no more than that it stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from omegaconf import DictConfig

from brisk.errors import BriskError
from brisk.run import entry
from brisk.utils import run_files
from brisk.utils.ranks import ENV, READY

if TYPE_CHECKING:
    from brisk.run.rundir import Run

# The agent's wait between the stop signal it forwards and SIGKILL (torch's default): a rank's checkpoint on SIGTERM
# (brisk.callbacks.SigtermCheckpoint) must be written by then.
SHUTDOWN_SECONDS = 30


def run(cfg: DictConfig, run: Run, nprocs: int) -> float | None:
    """Train on `nprocs` ranks of this node; return rank 0's `optimized_metric` from its summary.json."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from brisk.search import report

    run.record(cfg)  # composed, not written: rank 0 writes it at its first step, and `run.started` reads the disk
    # Rank 0 reports to the study itself: it runs in run mode, where Hydra's config names no trial.
    trial = report.Trial.current()
    handed = trial.env() if trial is not None else None  # a pruner the ranks cannot build is refused before they start
    pruned = run.dir / report.PRUNED
    pruned.unlink(missing_ok=True)  # only this launch's rank 0 says the trial was pruned
    redirects = {0: Std.ERR, **{r: Std.ALL for r in range(1, nprocs)}}
    logs = DefaultLogsSpecs(log_dir=str(run.dir / "ranks"), redirects=redirects, tee={0: Std.ERR})
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nprocs,
        run_id=run.dir.name,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # a free port of this node's own
        max_restarts=0,
        logs_specs=logs,
        start_method="spawn",
        role="",  # with this template, rank 0's lines reach the console as they are, with no "[role0]:" before them
        log_line_prefix_template="${role_name}",
        shutdown_timeout=SHUTDOWN_SECONDS,
        signals_to_handle="SIGTERM,SIGHUP,SIGQUIT",  # SIGINT: _CtrlC
    )
    os.environ[ENV] = str(os.getpid())
    os.environ.pop(report.ENV, None)  # one from the user's own environment names no trial of this job
    if handed is not None:
        os.environ[report.ENV] = handed
    ready = run.dir / "ranks" / "ready"
    ready.parent.mkdir(exist_ok=True)
    ready.unlink(missing_ok=True)  # only this launch's rank 0 says it is ready
    os.environ[READY] = str(ready)
    quiet = logging.root.manager.disable
    logging.disable(logging.ERROR)  # the agent's own lines on a rank's failure or a signal: the job says it in one
    ctrl_c = _CtrlC(ready, SignalException)
    try:
        with ctrl_c:
            elastic_launch(config, sys.executable)(*entry.rank_args())
    except ChildFailedError as e:
        _pruned(trial, pruned)
        _failed(e, run)
    except SignalException as e:
        _stopped(signal.SIGINT if ctrl_c.pressed else signal.Signals(e.sigval), run)
    finally:
        # the agent's own variable too: it holds the signals above, which no other launch should take over
        for name in (ENV, READY, report.ENV, "TORCHELASTIC_SIGNALS_TO_HANDLE"):
            os.environ.pop(name, None)
        ready.unlink(missing_ok=True)
        logging.disable(quiet)
    _pruned(trial, pruned)
    summary = run.dir / "summary.json"
    if not cfg.get("optimized_metric") or not summary.is_file():
        return None
    return run_files.load_json(summary)["metrics"].get(cfg.optimized_metric)  # bounded, as every run file is read


class _CtrlC:
    """The job's own SIGINT handler while the agent runs (LaunchConfig.signals_to_handle leaves it SIGINT).

    The agent would send the ranks the SIGINT it got. A rank still importing (the first seconds: torch, Lightning)
    dies of it with a KeyboardInterrupt traceback, and rank 0's reaches the console through the tee. So the ranks get
    SIGINT only once rank 0 has reached brisk's task (`guard` creates `ready`), where brisk stops it with one line;
    before that SIGTERM, whose default action ends a process quietly, and the job itself says it was interrupted.
    The agent's exception, raised here, makes it stop the ranks as on its own signals."""

    def __init__(self, ready, signal_exception) -> None:
        self.ready, self.signal_exception, self.pressed = ready, signal_exception, False
        self._saved = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # where Python runs signal handlers, and sets them
            self._saved = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            signal.signal(signal.SIGINT, self._saved)

    def _handle(self, signum, frame) -> NoReturn:
        self.pressed = True
        to_ranks = signal.SIGINT if self.ready.is_file() else signal.SIGTERM
        raise self.signal_exception(f"Process {os.getpid()} got signal: SIGINT", sigval=to_ranks)


def _pruned(trial, pruned) -> None:
    """Rank 0 was pruned: end the job as a pruned trial ends in the job itself, with optuna.TrialPruned, which the
    search records as pruned (brisk.search.sweep.outcome). The file's text is only the verdict it says."""
    if trial is None or not pruned.is_file():
        return
    import optuna

    verdict = run_files.read_bytes(pruned, 1 << 12).decode(errors="replace").strip()
    raise optuna.TrialPruned(verdict)


def _said(run: Run, rank: int) -> str:
    """What local rank `rank` wrote to its stderr.log last: rank 0's went to the console too."""
    logs = sorted(run.dir.glob(f"ranks/*/attempt_0/{rank}/stderr.log"))
    return logs[-1].read_text(errors="replace") if logs else ""


def _line(text: str) -> str | None:
    """The last line brisk ends a rank with (an error, a stop signal), or None."""
    return next((line for line in reversed(text.splitlines()) if line.startswith("brisk: ")), None)


def _failed(e, run: Run) -> NoReturn:
    """A rank failed. A user error (exit 2) ends with its own one line: on the console already where rank 0 said it
    (its stderr is teed), else read from the rank's stderr.log. Anything else says where the rank's traceback is."""
    failures = sorted(e.failures.items())  # [(global rank, ProcessFailure)], those the agent saw end first
    rank, failure = next(((r, f) for r, f in failures if f.exitcode == 2), failures[0])
    said = _line(_said(run, 0))
    if said or (rank == 0 and failure.exitcode == 2):
        run.refused()
        stopped = [f.exitcode for _, f in failures if f.exitcode > 128]  # rank 0's first
        if said and said.startswith("brisk: interrupted by ") and stopped:
            # A stop signal that reached a rank, not the agent (`kill <rank 0 pid>`): the ranks agreed on it, saved
            # together and exited 128 + the signal; so does the job, as for a signal that the agent forwards.
            sys.exit(stopped[0])
        sys.exit(2 if failure.exitcode == 2 else 1)
    if failure.exitcode == 2 and (line := _line(_said(run, failure.local_rank))):
        raise BriskError(line.removeprefix("brisk: error: "))
    log = run.dir / "ranks" if rank == 0 else f"{run.dir}/ranks/*/attempt_0/{failure.local_rank}/stderr.log"
    print(f"brisk: error: rank {rank} failed with exit code {failure.exitcode}; see {log}", file=sys.stderr)
    run.refused()
    sys.exit(1)


def _end_unheld_ranks() -> None:
    """Kill and reap what the agent could not stop: ranks started just before the signal came, while it was still
    starting them (it stops only those it already holds). One that lived on would run Hydra after the run directory
    is removed and make it again (seen once in CI), and die only in `guard`, with no job to serve."""
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in map(int, children.read_text().split()):
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def _stopped(signum: signal.Signals, run: Run) -> NoReturn:
    """The agent took a stop signal and sent it to the ranks. Rank 0 said where it saved if it was training, or that
    it stopped outside training once in brisk's task; before that no rank said anything, and nothing was saved. A run
    stopped before its first step leaves no directory: rank 0 removes none under this launch, the job holds it."""
    _end_unheld_ranks()
    if not _line(_said(run, 0)):
        print(f"brisk: interrupted by {signum.name} before training; no checkpoint written", file=sys.stderr)
    run.refused()  # nothing once the run has started
    sys.exit(128 + signum)
