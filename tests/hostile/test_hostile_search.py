"""Hostile and unlucky search storage and settings: each search is refused with exit status 2 and one
`brisk: error:` line naming the `hydra.sweeper` key and the fix, before it writes anything: no sweep
directory, the storage file unchanged to the byte. The refusals run brisk-train's real entry point
(Hydra's multirun path, brisk's sweeper) in this process, against real SQLite files. Which RUNNING trial
another search takes over is decided on a real study; searches that share a study and one killed among
them run as real processes, since the process boundary is the point there.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from brisk.search import loop
from brisk.search import storage as storages
from brisk.search import trials as owners
from helpers import BASE, TINY, assert_user_error, brisk_train, tree, without_rights

optuna.logging.set_verbosity(optuna.logging.WARNING)
SEARCH = ["hparams_search=optuna", "hydra.sweeper.n_trials=1"]


def _study_file(path: Path) -> Path:
    """A real Optuna storage holding one study (maximize), as an earlier search leaves it."""
    optuna.create_study(storage=f"sqlite:///{path}", study_name="brisk", direction="maximize")
    return path


def _corrupt(base: Path):
    db = _study_file(base / "optuna.db")
    with db.open("r+b") as f:  # the header and the first page's start overwritten, as by a bad copy
        f.write(os.urandom(512))
    return [f"hydra.sweeper.storage=sqlite:///{db}"], ("hydra.sweeper.storage=", "not a readable SQLite database")


def _readonly_file(base: Path):
    db = _study_file(base / "optuna.db")
    db.chmod(0o444)
    return [f"hydra.sweeper.storage=sqlite:///{db}"], ("hydra.sweeper.storage=", "read-only", f"chmod u+w {db}")


def _readonly_folder(base: Path):
    folder = base / "studies"
    folder.mkdir()
    db = _study_file(folder / "optuna.db")
    db.chmod(0o666)
    folder.chmod(0o555)  # the file may be written, but SQLite cannot create its journal beside it
    return [f"hydra.sweeper.storage=sqlite:///{db}"], ("hydra.sweeper.storage=", f"folder {folder}", "journal")


def _mysql_without_driver(base: Path):
    url = "mysql://brisk:secret@localhost/optuna"
    return [f"hydra.sweeper.storage={url}"], ("hydra.sweeper.storage=mysql://brisk:***@", "pip install mysqlclient")


def _folder_name_too_long(base: Path):
    url = f"sqlite:///{base / 'a' / 'b' / ('x' * 300) / 'optuna.db'}"
    return [f"hydra.sweeper.storage={url}"], ("hydra.sweeper.storage", "300 bytes long", "Choose a shorter")


def _with_study(*overrides: str, needles: tuple[str, ...]):
    """A bad setting, with a real storage given, which must stay as it was: a case run by this process's user."""

    def make(base: Path):
        db = _study_file(base / "optuna.db")
        return [f"hydra.sweeper.storage=sqlite:///{db}", *overrides], needles

    return make, False


CASES = {
    "corrupt sqlite file": (_corrupt, False),
    "read-only sqlite file": (_readonly_file, True),
    "read-only sqlite folder": (_readonly_folder, True),
    "mysql without its driver": (_mysql_without_driver, False),
    "sqlite folder name too long": (_folder_name_too_long, False),
    "bad interval": _with_study(
        "hydra.sweeper.params={optimizer.lr:'interval(0.5,0.005)'}",
        needles=("hydra.sweeper.params.optimizer.lr=interval(0.5, 0.005)", "e.g. interval(0.005, 0.5)"),
    ),
    "log of 0": _with_study(
        "hydra.sweeper.params={optimizer.lr:'tag(log,interval(0,0.5))'}",
        needles=("hydra.sweeper.params.optimizer.lr=", "start > 0", "tag(log, interval(0.0005, 0.5))"),
    ),
    "log of a range from 0": _with_study(
        "data.batch_size=tag(log,range(0,512))",
        needles=("data.batch_size=tag(log, range(0, 512))", "start >= 1", "tag(log, range(1, 512))"),
    ),
    "unknown sampler": _with_study(
        "hydra.sweeper.sampler=bayes", needles=("hydra.sweeper.sampler=bayes", "tpe, random, grid")
    ),
    "unknown direction": _with_study(
        "hydra.sweeper.direction=max", needles=("hydra.sweeper.direction=max", "=maximize")
    ),
    # A pruner given by its `_target_` is built by Hydra (InstantiationException), which names the key only in its text
    "pruner argument misspelt": _with_study(
        "hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner,n_startup_trialz:3}",
        needles=("hydra.sweeper.pruner.n_startup_trialz:", "did you mean hydra.sweeper.pruner.n_startup_trials?"),
    ),
    "pruner argument missing": _with_study(
        "hydra.sweeper.pruner={_target_:optuna.pruners.PercentilePruner}",
        needles=("hydra.sweeper.pruner.percentile:", "Set it: hydra.sweeper.pruner.percentile=<value>"),
    ),
    "pruner class unknown": _with_study(
        "hydra.sweeper.pruner={_target_:optuna.pruners.Nope}",
        needles=("hydra.sweeper.pruner._target_=optuna.pruners.Nope", "nothing can be imported"),
    ),
    "pruner value refused": _with_study(
        "hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner,n_startup_trials:-3}",
        needles=("hydra.sweeper.pruner:", "MedianPruner refused its settings", "n_startup_trials=-3"),
    ),
    "direction of the stored study": _with_study(
        "hydra.sweeper.direction=minimize",
        needles=("hydra.sweeper.direction=minimize", "created to maximize", "direction=maximize"),
    ),
}


@pytest.fixture
def base():
    """A folder outside pytest's private (0700) ones, so a case may run as a user without rights."""
    folder = Path(tempfile.mkdtemp(prefix="brisk-hostile-search-"))
    folder.chmod(0o777)
    (folder / "data").mkdir()  # nothing may be read from it: every case is refused before a trial
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o777)
    shutil.rmtree(folder)


@pytest.mark.parametrize("case", CASES)
def test_a_refused_search_writes_nothing(case, base, capsys, monkeypatch, restore_logging):  # noqa: F811
    make, as_nobody = CASES[case]
    overrides, needles = make(base)
    sweep = base / "logs" / "sweep"
    before = tree(base)
    argv = ["-m", *BASE, *SEARCH, f"hydra.sweep.dir={sweep}", *overrides]
    if as_nobody:
        optuna.storages.RDBStorage("sqlite:///:memory:")  # its lazy imports, while this process may read them
        with without_rights():
            proc = brisk_train(argv, base, capsys, monkeypatch)
    else:
        proc = brisk_train(argv, base, capsys, monkeypatch)
    line = assert_user_error(proc, *needles)
    assert "secret" not in line
    assert not (base / "logs").exists(), "a refused search left its sweep directory"
    assert tree(base) == before, "a refused search wrote, removed or changed files"


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# What a search that is PID 1 in its own PID namespace writes, from a child with the pid the argument names.
IN_ANOTHER_NAMESPACE = """
import os, sys
from pathlib import Path
Path("/proc/sys/kernel/ns_last_pid").write_text(str(int(sys.argv[1]) - 1))  # the namespace's next pid: argv[1]
if os.fork() == 0:
    from brisk.search.trials import owner
    print(os.getpid(), owner())
    sys.exit(0)
os.wait()
"""


def _mark_from_another_container() -> str:
    """The owner mark of a search in another container with this hostname (its own PID namespace), whose pid is one
    that no process has here: a live search there must not look dead here."""
    pid = _dead_pid()
    env = {**os.environ, "PYTHONPATH": str(Path(owners.__file__).parents[2])}
    for user in (["--user", "--map-root-user"], []):  # without root, a PID namespace needs a user namespace
        command = ["unshare", *user, "--pid", "--fork", "--mount-proc", sys.executable, "-c", IN_ANOTHER_NAMESPACE]
        try:
            proc = subprocess.run([*command, str(pid)], capture_output=True, text=True, env=env, timeout=60)
        except FileNotFoundError:
            break
        if proc.returncode == 0:
            inner, mark = proc.stdout.split()
            assert int(inner) == pid and mark.startswith(socket.gethostname()), proc.stdout
            return mark
    pytest.skip("this system lets no test make a PID namespace (unshare)")


# Each case: who marked the RUNNING trial (None: nobody yet), how many seconds ago it was asked and beat last,
# and whether another search takes it over (fails it and asks its parameters again).
TAKEOVER = {
    "its search runs on this machine": (lambda: f"{owners.machine()}:{os.getppid()}", 0, False),
    "its search died on this machine": (lambda: f"{owners.machine()}:{_dead_pid()}", 0, True),
    "its search runs in another container with this hostname": (_mark_from_another_container, 0, False),
    "its search beats on another machine": (lambda: "elsewhere.example:1", 0, False),
    "its search on another machine stopped beating": (lambda: "elsewhere.example:1", owners.GRACE + 60, True),
    "just asked, not marked yet": (None, 0, False),
    "asked, never marked": (None, owners.GRACE + 60, True),
}


@pytest.mark.parametrize("case", TAKEOVER)
def test_a_running_trial_is_taken_over_only_when_its_search_is_gone(case, tmp_path):
    who, age, taken = TAKEOVER[case]
    with owners.quiet():
        storage = storages.open_checked(f"sqlite:///{tmp_path / 'optuna.db'}", owners.HEARTBEAT)
    study = optuna.create_study(storage=storage, study_name="brisk", direction="maximize")
    space = {"x": optuna.distributions.FloatDistribution(0, 1)}
    with owners.quiet():  # ask() warns where the storage keeps heartbeats, as brisk's sweeper's does
        trial = study.ask(space)
    trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("brisk"), 0)
    if who is not None:
        storage.record_heartbeat(trial_id)
        trial.set_user_attr(owners.OWNER, who())
    with storage.engine.begin() as db:  # as long ago as the case says, by the clocks Optuna reads
        db.execute(
            sqlalchemy.text(
                f"UPDATE trials SET datetime_start = datetime('now', 'localtime', '-{age} seconds');"
                if who is None
                else f"UPDATE trial_heartbeats SET heartbeat = datetime('now', '-{age} seconds');"
            )
        )
    owners.recover(study)
    (first, *waiting) = study.get_trials()
    assert first.state == (TrialState.FAIL if taken else TrialState.RUNNING)
    assert [t.state for t in waiting] == [TrialState.WAITING] * taken
    if taken:  # the next search to ask gets the same point again
        with owners.quiet():
            again = study.ask(space)
        assert again.params == first.params and again.user_attrs == {owners.RETRY_OF: 0}


def test_a_search_counting_while_another_asks_the_last_trial_asks_none(tmp_path):
    """Counting the budget and asking are one step under the SQLite folder's lock: a search that counts while
    another asks the last trial of the budget waits for it, then finds the budget taken."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    with owners.quiet():
        storage = storages.open_checked(url, owners.HEARTBEAT)
    study = optuna.create_study(storage=storage, study_name="brisk", direction="maximize")
    space = {"x": optuna.distributions.FloatDistribution(0, 1)}
    asked = []
    with storages.locked(url):  # another search holds it, between its own count and its ask
        counting = threading.Thread(target=lambda: asked.append(loop.next_batch(study, url, space, 1, 1)))
        counting.start()
        counting.join(1)
        assert counting.is_alive(), "the count did not wait for the other search's ask"
        with owners.quiet():
            study.ask(space)  # the other search takes the last trial
    counting.join(60)
    assert asked == [([], 1)], "asked beyond the budget, or did not count the other search's trial"
    assert len(study.get_trials()) == 1


# Trials of a second or so: 4 steps of 100 images at a constant rate, one validation batch, one test batch.
QUICK = [
    *TINY,
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=4",
    "scheduler=none",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "callbacks.progress_bar=null",
    "hydra.sweeper.params=null",
    "hydra.sweeper.pruner=none",
    "optimizer.lr=tag(log,interval(0.01,0.1))",
]


def _search(project: Path, url: str, name: str, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "BRISK_ROOT": str(project), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    args = ["-m", *QUICK, "hparams_search=optuna", "hydra.sweeper.n_trials=3", f"hydra.sweeper.storage={url}"]
    args += [f"hydra.sweep.dir={project / name}", *overrides]
    out = (project / f"{name}.out").open("w")
    err = (project / f"{name}.err").open("w")
    return subprocess.Popen([sys.executable, "-m", "brisk.train", *args], cwd=project, env=env, stdout=out, stderr=err)


def _wait_for(check, procs: dict[str, subprocess.Popen], project: Path, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited: " + (project / f"{name}.err").read_text()[-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _runs_a_trial(url: str, pid: int) -> bool:
    try:
        running = optuna.load_study(study_name="brisk", storage=url).get_trials(states=(TrialState.RUNNING,))
    except KeyError:  # the study is not there yet
        return False
    return any(t.user_attrs.get("brisk_sweeper", "").endswith(f":{pid}") for t in running)


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_resumed_or_shared_study_is_not_proposed_its_own_points_again(sampler, tmp_path):
    """Each search process builds its sampler with hydra.sweeper.seed: one that opens a study already there must
    not replay the draws the study's first search made."""
    from types import SimpleNamespace

    from brisk.search import study as studies

    settings = SimpleNamespace(direction="maximize", sampler=sampler, seed=0, pruner="none", study_name="s")
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    proposed = []
    for _ in range(2):  # the first search, then the same command again
        study, _ = studies.create(settings, url)
        trial = study.ask()
        proposed.append(trial.suggest_float("lr", 1e-3, 1.0, log=True))
        study.tell(trial, 0.5)
    assert proposed[0] != proposed[1]


@pytest.mark.slow  # three searches started on 2 cores: 40-100 s, over the default suite's budget
def test_searches_share_a_study_and_one_killed_mid_trial_is_taken_over(project):
    """A search is killed (SIGKILL) inside a trial while two more run on its study; those two finish the budget
    between them, the killed trial failed and asked again, none left RUNNING, none run twice."""
    url = f"sqlite:///{project / 'optuna.db'}"
    killed = _search(project, url, "killed", "trainer.max_epochs=100000")  # its trial runs until it is killed
    procs = {"killed": killed}
    try:
        # multirun.yaml: written once a search has opened the study and passed its checks
        _wait_for(lambda: (project / "killed" / "multirun.yaml").is_file(), procs, project)
        _wait_for(lambda: _runs_a_trial(url, killed.pid), procs, project)
        procs |= {"a": _search(project, url, "a"), "b": _search(project, url, "b")}  # started together
        _wait_for(lambda: all((project / n / "multirun.yaml").is_file() for n in procs), procs, project)
        killed.send_signal(signal.SIGKILL)  # and not reaped until the end: a zombie is a dead search too
        for name in ("a", "b"):
            assert procs[name].wait(300) == 0, (project / f"{name}.err").read_text()[-3000:]
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    for name in ("a", "b"):
        err = (project / f"{name}.err").read_text()
        assert "Traceback" not in err and "database is locked" not in err and "brisk: error" not in err, err[-3000:]
    trials = optuna.load_study(study_name="brisk", storage=url).get_trials()
    states = Counter(t.state for t in trials)
    assert states == {TrialState.COMPLETE: 3, TrialState.FAIL: 1}, states  # the budget, no more, and the killed one
    (lost,) = [t for t in trials if t.state == TrialState.FAIL]
    (retry,) = [t for t in trials if t.user_attrs.get("brisk_retry_of") == lost.number]
    assert retry.state == TrialState.COMPLETE and retry.params == lost.params
    jobs = [int(p.name) for name in ("a", "b") for p in (project / name).iterdir() if p.is_dir()]
    assert sorted(jobs) == sorted(t.number for t in trials if t.state == TrialState.COMPLETE), "a trial ran twice"
