"""A sweep whose jobs run in a launcher's processes (joblib's loky workers, submitit_local's tasks): a stop signal
to the process the user started reaches every job that runs, and nothing trains on after the sweep has exited.

Left alone, SIGTERM killed the sweep's process at once (exit -15, no line) while both loky workers, or submitit's
tasks, trained on: their last.ckpt was still rewritten 10 s later. So the sweep's process passes the signal on to
the jobs that run and exits only once they have stopped, each as a signalled run does (SigtermCheckpoint: one
checkpoint, 143); and each job watches the user's process, so a SIGKILL of it stops the jobs too. Linux: /proc.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from brisk.callbacks.sigterm_checkpoint import STOP_SIGNALS
from brisk.run.entry import proc_stat

log = logging.getLogger("brisk")

# How long a stopping job may take to write its checkpoint before it is killed.
GRACE_SECONDS = 30


def same_process(pid: int, ticks: int) -> bool:
    """Whether `pid` still is the process that started at `ticks` and has not exited (a zombie has)."""
    try:
        fields = proc_stat(pid)
    except (OSError, IndexError):
        return False
    return fields[19] == ticks and fields[0] not in ("Z", "X")


class UserWatch(threading.Thread):
    """In a launcher's worker: once the process the user started is gone (SIGKILL, a crash), SIGTERM to this
    process, so the job it runs stops as a SIGTERM'd run does (SigtermCheckpoint: one checkpoint, 143), then
    the worker ends instead of waiting for a launcher that is no more. The user's process, not the parent:
    submitit's controller between the two lives on while its task does."""

    def __init__(self, pid: int, ticks: int) -> None:
        super().__init__(daemon=True, name="brisk-user-watch")
        self.user = pid, ticks
        self.running = threading.Event()  # a job runs in this process now

    def run(self) -> None:
        while same_process(*self.user):
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while self.running.is_set() and time.monotonic() < deadline:
            time.sleep(0.1)
        os._exit(128 + signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A stop signal outside a Trainer stage in a launcher's worker: the job ends as after a Ctrl-C there."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, frame) -> None:
    for s in STOP_SIGNALS:  # already stopping: a second signal must not cut the cleanup short
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def in_worker(pid: int, ticks: int) -> Iterator[None]:
    """Run a job in a launcher's worker: watched against its user's process, and stopped by SIGTERM or SIGINT
    outside training too (loky's worker would die of SIGTERM, and then loky SIGKILLs its other workers,
    checkpoint or not; submitit's task ignores SIGTERM)."""
    watch = next((t for t in threading.enumerate() if isinstance(t, UserWatch)), None)
    if watch is None:  # one per process: a worker runs one job after another
        watch = UserWatch(pid, ticks)
        watch.start()
    before = {s: signal.signal(s, _interrupt) for s in STOP_SIGNALS}
    watch.running.set()
    try:
        yield
    finally:
        watch.running.clear()
        for s, handler in before.items():
            signal.signal(s, handler)


def stop_jobs_on_signal() -> None:
    """In the process the user started, whose sweep runs its jobs in a launcher's processes (joblib, submitit_local):
    SIGTERM or SIGINT goes on to the jobs that run, and this process ends, 128 + the signal, only once they have
    stopped, each as a signalled run does (a checkpoint where it was training). Left alone it would die at once
    and the workers would train on."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_jobs)


def _stop_jobs(signum: int, frame) -> None:
    for s in STOP_SIGNALS:  # a second Ctrl-C must not cut the wait short
        signal.signal(s, signal.SIG_IGN)
    jobs = _running_jobs()
    for pid in jobs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)  # a terminal's group has it already: a job counts the copy once
    deadline = time.monotonic() + 2 * GRACE_SECONDS
    while (left := _running_jobs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        log.error("job process %d did not stop; killing it", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    name = signal.Signals(signum).name
    print(f"brisk: interrupted by {name}; {len(jobs)} running job(s) of the sweep stopped", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


def _running_jobs() -> list[int]:
    """The processes below this one that run a job: a run holds a lock on its directory (brisk.run.rundir) while
    it lives. Idle workers hold none, and are left to their launcher."""
    parents = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                parents[int(proc.name)] = proc_stat(int(proc.name))[1]
    below, me = set(), os.getpid()
    for pid in parents:
        p = pid
        while p in parents and p not in (me, 0, 1):
            p = parents[p]
        if p == me and pid != me:
            below.add(pid)
    try:
        locks = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    holders = {int(f[4]) for f in map(str.split, locks) if len(f) > 4 and f[1] == "FLOCK" and f[4].isdigit()}
    return sorted(below & holders)
