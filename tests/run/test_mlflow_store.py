"""`logger=mlflow` against what it meets in the field, with real parts: a tracking server that is down (a closed
local port), store files that are not mlflow stores (real sqlite files), and two real processes opening one new
store at once. Each is refused in one line naming logger.mlflow.tracking_uri as the logger is built, or works."""

from __future__ import annotations

import multiprocessing
import os
import socket
import sqlite3
import time
import traceback

import pytest

from brisk.errors import BriskError
from brisk.run import loggers

pytest.importorskip("mlflow")
KEY = "logger.mlflow.tracking_uri"


def checked(uri: str) -> BriskError:
    with pytest.raises(BriskError) as refused:
        loggers.check("logger.mlflow", {"type": "mlflow", "tracking_uri": uri, "experiment_name": "brisk"})
    assert refused.value.key == KEY
    assert str(refused.value).startswith(f"{KEY}={uri}: ")
    assert "\n" not in str(refused.value)
    return refused.value


def closed_port() -> int:
    """A local port nothing listens on: bound, then let go (connecting to it is refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tracking_server_that_is_down_is_named_after_one_short_try(monkeypatch):
    """mlflow's own client would retry for minutes; the probe tries once, and leaves no setting of its own behind."""
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    uri = f"http://127.0.0.1:{closed_port()}"
    start = time.monotonic()
    error = checked(uri)
    assert time.monotonic() - start < 15  # imports included; the request itself is refused at once
    assert "no mlflow tracking server answers there (Connection refused; one try" in str(error)
    assert "mlflow server" in str(error) and f"leave {KEY} out" in str(error)
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


@pytest.mark.parametrize("kind", ["not a database", "another database", "half-migrated"])
def test_a_store_that_is_not_a_working_mlflow_store_is_named_and_left_as_it_was(tmp_path, kind):
    """A file that is not sqlite, a sqlite database of someone else's tables (mlflow would add its own to it), and
    a store whose migration was cut off (what two unlocked runs left): one line naming the file and the fix; the
    file is not touched."""
    store = tmp_path / "mlflow.db"
    if kind == "not a database":
        store.write_bytes(b"this is not a database\n" * 100)
    else:
        with sqlite3.connect(store) as db:
            if kind == "another database":
                db.execute("CREATE TABLE experiments (x INTEGER)")
            else:  # the tables a cut-off batch migration leaves: its version table and its temporary copy
                db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
                db.execute("INSERT INTO alembic_version VALUES ('0584bdc529eb')")
                db.execute("CREATE TABLE experiments (experiment_id INTEGER)")
                db.execute("CREATE TABLE _alembic_tmp_experiments (experiment_id INTEGER)")
        db.close()
    before = store.read_bytes()
    error = str(checked(f"sqlite:///{store}"))
    reason = {
        "not a database": "is not an mlflow store (file is not a database)",
        "another database": "is not an mlflow store (a database with tables experiments and no alembic_version)",
        "half-migrated": "is half-migrated (a migration of its tables was cut off; _alembic_tmp_experiments is left)",
    }[kind]
    assert f"{store} {reason}" in error
    assert f"mv {store} {store}.broken" in error
    assert store.read_bytes() == before


def open_store(uri: str, start, errors) -> None:
    """One run of the race, in its own process: waits for the other at the barrier, so both open the store at the
    same moment, then builds and uses the logger as brisk-train does."""
    from brisk.registry import LOGGERS

    spec = {"type": "mlflow", "tracking_uri": uri, "experiment_name": "brisk"}
    start.wait(timeout=60)
    try:
        loggers.check("logger.mlflow", spec)
        logger = LOGGERS.build(spec)
        logger.log_metrics({"val/acc": 0.5}, step=0)
        logger.finalize("success")
    except BaseException:
        errors.put(traceback.format_exc())
        raise


def test_two_runs_opening_one_new_store_at_once_both_use_it(tmp_path):
    """Two real processes make one new store at the same moment, twice over: the first makes and migrates it
    under the lock, the second waits and uses it. Unlocked, mlflow's two migrations collide (`duplicate column
    name`) and leave the store half-made. Forked from this process, which has imported brisk and mlflow already,
    so the processes start at once and the test takes the time of the store alone."""
    import mlflow  # noqa: F401  imported before the fork: the children start with it

    fork = multiprocessing.get_context("fork")
    for round_ in range(2):
        store = tmp_path / f"round{round_}" / "mlflow.db"
        start, errors = fork.Barrier(2), fork.Queue()
        procs = [fork.Process(target=open_store, args=(f"sqlite:///{store}", start, errors)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
            if p.is_alive():
                p.kill()
                p.join()
        failures = [errors.get(timeout=5) for p in procs if p.exitcode != 0]
        assert not failures, "\n".join(failures)
        with sqlite3.connect(store) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            runs = db.execute(
                "SELECT COUNT(*) FROM runs JOIN experiments USING (experiment_id) WHERE experiments.name = 'brisk'"
            ).fetchone()[0]
        db.close()
        assert {"experiments", "runs", "metrics", "alembic_version"} <= tables
        assert not [t for t in tables if t.startswith("_alembic_tmp_")]
        assert runs == 2
