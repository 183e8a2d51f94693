"""Whose trial is it: searches that share a study, and trials left running by a search that was killed.

Any number of searches may run on one study at once, on one machine or many. Each marks the trials it
asks as its own and keeps their heartbeat (Optuna's, in the storage) while they run. A RUNNING trial
whose search is gone is failed and its parameters are asked again: at once when its search ran in this
PID namespace (`machine`) and that process has died, otherwise once its heartbeat is GRACE seconds old.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import warnings
from datetime import datetime, timedelta
from pathlib import Path

log = logging.getLogger("brisk")

# Trial user attributes brisk sets: which sweeper process asked the trial, and which trial a retry repeats.
OWNER = "brisk_sweeper"
RETRY_OF = "brisk_retry_of"
# Where the trial's run wrote its files (summary.json): a resumed search writes a new sweep folder, and its
# comparison finds the earlier folders' runs from here.
RUN_DIR = "brisk_run_dir"
# A beat every INTERVAL s; a search missing for GRACE s is taken for dead. The sweeper's own storage writes
# can wait up to 60 s for a busy SQLite file, hence the margin.
INTERVAL, GRACE = 10, 120


def retry(study, trial) -> None:
    """Ask a trial whose search is gone again, with its parameters (also Optuna's callback for a stale one)."""
    study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})
    log.warning("trial %d was left running by an interrupted search: marked FAIL, asked again", trial.number)


# RDBStorage's arguments for the sweeper's storage: fail_stale_trials (in `recover`) fails and retries a trial
# whose heartbeat is older than GRACE.
HEARTBEAT = {"heartbeat_interval": INTERVAL, "grace_period": GRACE, "heartbeat_stale_trial_callback": retry}


@contextlib.contextmanager
def quiet():
    """Optuna calls heartbeats experimental and expects them with study.optimize; brisk's ask/tell loop keeps
    them itself (`claimed`), so those warnings say nothing to the user."""
    from optuna.exceptions import ExperimentalWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used", UserWarning)
        yield


def machine() -> str | None:
    """Where a pid names one process: this PID namespace of this boot of this machine. A hostname does not
    tell: containers may share one, each with its own pids (a sweeper there is often PID 1), and the first
    PID namespace has the same inode on every Linux machine. None where /proc does not say (macOS): then
    every search is judged by its heartbeat."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{socket.gethostname()}/{boot}/{namespace}"


def owner() -> str:
    return f"{machine() or socket.gethostname()}:{os.getpid()}"


@contextlib.contextmanager
def claimed(storage, study, batch):
    """The batch's trials are this process's while the block runs: their first beat, then the owner mark,
    then a beat every INTERVAL s from a thread. Beating first means that a marked trial always has a
    heartbeat to be judged by (an unmarked one is judged by its age)."""
    study_id = storage.get_study_id_from_name(study.study_name)
    ids = [storage.get_trial_id_from_study_id_trial_number(study_id, trial.number) for trial in batch]
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(INTERVAL):
            for trial_id in ids:
                # A missed beat is made up by the next one; a lasting storage fault shows in the trials' own writes.
                try:
                    storage.record_heartbeat(trial_id)
                except Exception as e:
                    log.warning("heartbeat of trial %d not recorded: %s", trial_id, e)

    for trial_id in ids:
        storage.record_heartbeat(trial_id)
    for trial in batch:
        trial.set_user_attr(OWNER, owner())
    thread = threading.Thread(target=beat, name="brisk-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _gone(trial, now: datetime, here: str | None) -> bool:
    """A RUNNING trial of another search whose process has died in this PID namespace (`here`), or one that a
    killed search asked and never marked. Searches elsewhere are judged by their heartbeat (`recover`)."""
    who = trial.user_attrs.get(OWNER)
    if who is None:
        return trial.datetime_start is not None and now - trial.datetime_start > timedelta(seconds=GRACE)
    where, _, pid = who.rpartition(":")
    if here is None or where != here or not pid.isdigit():
        return False
    # None of this search's own trials runs when it looks, so its own pid is an earlier process's.
    return int(pid) == os.getpid() or _dead(int(pid))


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, as another user
        pass
    try:  # a process that has exited but waits for its parent to reap it (a zombie): os.kill still finds it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):  # no /proc (macOS), or it has just gone
        return False


def recover(study) -> list:
    """Fail the trials whose search is gone and enqueue their parameters to be asked again; returns the study's
    trials as they stand then, read once, less those failed here (they count neither way, as their retries do
    not yet). Called between batches, while none of this search's own trials is running."""
    import optuna
    from optuna.trial import TrialState

    with quiet():
        optuna.storages.fail_stale_trials(study)  # the storage's callback, `retry`, enqueues each one
    listed = study.get_trials(deepcopy=False)
    now, here, taken = datetime.now(), machine(), set()
    for trial in listed:
        if trial.state != TrialState.RUNNING or not _gone(trial, now, here):
            continue
        taken.add(trial.number)
        try:
            study.tell(trial.number, state=TrialState.FAIL)
        except (ValueError, optuna.exceptions.UpdateFinishedTrialError):  # another search failed it first
            continue
        retry(study, trial)
    return [t for t in listed if t.number not in taken]


def record_run(trial, ret) -> None:
    """Note in the study where the trial's job wrote its run (RUN_DIR), before its end is told. A trial whose
    overrides did not compose (`ret` an exception) has no folder."""
    import optuna

    hydra_cfg = getattr(ret, "hydra_cfg", None)
    if hydra_cfg is None:
        return
    # A trial another search took for abandoned has been failed: nothing to note then.
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
        trial.set_user_attr(RUN_DIR, str(hydra_cfg.hydra.runtime.output_dir))


def finished(listed: list) -> int:
    """Trials that count towards n_trials: complete, pruned, or failed, but not those a kill interrupted
    (they are asked again)."""
    from optuna.trial import TrialState

    retried = {t.user_attrs[RETRY_OF] for t in listed if RETRY_OF in t.user_attrs}
    ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(t.state in ended and t.number not in retried for t in listed)


def running(listed: list) -> int:
    """Trials running now; between batches, those of other searches. They count towards n_trials too."""
    from optuna.trial import TrialState

    return sum(t.state == TrialState.RUNNING for t in listed)
