"""An mlflow logger's tracking URI, checked as the logger is built (brisk.run.loggers.check): a server that does not
answer is one line after one short try, a store that is not one is one line naming the file, and a new sqlite store
is created and migrated once, under a file lock, while a second run waits for it (without the lock, two runs opening a
new store at once left it half-migrated in 5 of 5 tries of tests/run/test_mlflow_store.py's race)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from brisk.errors import BriskError, first_line

# One try, this long, for an mlflow server that does not answer: mlflow's own default is 7 retries with backoff and a
# 120 s timeout per try, minutes before a run that can never log says so.
MLFLOW_PROBE_TIMEOUT_S = 5


def check(key: str, spec: Mapping[str, Any]) -> None:
    """The tracking URI as Lightning's MLFlowLogger takes it (its argument, else MLFLOW_TRACKING_URI); http(s) is
    probed, sqlite opened. Others (databricks, file:, which mlflow 3.17+ refuses itself) are mlflow's to judge."""
    uri = spec.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
    if not isinstance(uri, str):
        return
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()  # sqlite+pysqlite:///... is sqlite too
    if scheme in ("http", "https"):
        _mlflow_server(f"{key}.tracking_uri", uri, spec)
    elif scheme == "sqlite":
        _mlflow_store(f"{key}.tracking_uri", uri, spec)


def _mlflow_server(key: str, uri: str, spec: Mapping[str, Any]) -> None:
    """Ask the server once, the way the logger will (mlflow's client: its auth, TLS and proxy settings), with no
    retry and a short timeout. The run itself keeps mlflow's retries: a server that answered at the start and blips
    mid-run is waited for, as mlflow means to."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    # mlflow reads these at each request (mlflow.environment_variables); set only around this one request. A
    # timeout the user set is theirs (a slow server); the retries are the probe's.
    timeout = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or str(MLFLOW_PROBE_TIMEOUT_S)
    probe = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": timeout}
    try:
        with _environ(probe):
            MlflowClient(tracking_uri=uri).get_experiment_by_name(spec.get("experiment_name") or "lightning_logs")
    except (MlflowException, OSError) as e:  # requests' errors are OSErrors
        if (down := _os_reason(e)) is None:  # it answered: an error status, credentials, a wrong path
            raise BriskError(
                f"{key}={uri}: the mlflow tracking server there refused the probe ({first_line(e)[:300]}). Correct "
                "the address or the credentials (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and _PASSWORD), "
                f"or log to the local store: leave {key} out (sqlite, logs/mlflow.db).",
                key,
            ) from None
        raise BriskError(
            f"{key}={uri}: no mlflow tracking server answers there ({down}; one try of {timeout} s). Start the "
            f"server (`mlflow server --host <host> --port <port>`) or correct the address, or log to the local "
            f"store: leave {key} out (sqlite, logs/mlflow.db).",
            key,
        ) from None


def _os_reason(error: BaseException | None) -> str | None:
    """The words of the innermost OS error under requests' and urllib3's wrappers ("Connection refused", "timed
    out", a name that does not resolve), where the request never reached a server; None where it did."""
    found, seen = None, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and (error.strerror or isinstance(error, TimeoutError)):
            found = error.strerror or str(error) or "timed out"
        error = error.__cause__ or error.__context__
    return found


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in os.environ for the block, then what was there before (the user's own settings for the run)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _mlflow_store(key: str, uri: str, spec: Mapping[str, Any]) -> None:
    """Open the sqlite store under a lock on `<store>.lock` beside it, so that of runs that start together (a joblib
    sweep, two terminals, DDP's ranks) one makes and migrates a new store and the others wait, then find it made.

    mlflow makes a store's tables on first use, unlocked: two processes migrating one new store at once both failed
    (`duplicate column name`) and could leave it half-migrated, every later run failing on `_alembic_tmp_*`. The
    experiment is made under the lock too: two runs that both find it missing would both create it, and one fail.
    flock is released when the process ends, however it ends; a kill mid-migration leaves the store half-made, which
    the next run names. The lock file stays (removing it would let a third process lock a new file while a second
    holds the old one). On NFS, flock and sqlite's own locks may not hold (conf/logger/mlflow.yaml: use a server)."""
    from sqlalchemy.engine import make_url

    database = make_url(uri).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return  # nothing on disk to share, or a URI filename mlflow reads its own way
    store = Path(database).expanduser().absolute()
    moved = f"mv {shlex.quote(str(store))} {shlex.quote(f'{store}.broken')}"
    fix = f"Move it aside ({moved}) and run again to start a new store, or set {key} to another sqlite:///<file>."
    try:  # mlflow would make the folder; the lock file needs it first. O_NOFOLLOW: a planted link is not followed
        store.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(f"{store}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise BriskError(
            f"{key}={uri}: cannot write beside the store {store} ({e.strerror or e}). Set {key} to a "
            "sqlite:///<file> in a folder you can write.",
            key,
        ) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks while another process makes the store
        _sqlite_tables(key, uri, store, fix)
        _open_store(key, uri, store, spec, fix)
    finally:
        os.close(lock)  # releases the lock


def _sqlite_tables(key: str, uri: str, store: Path, fix: str) -> None:
    """Refuse a file that is not a sqlite database, a database that is not mlflow's, or a store whose migration was
    cut off, before mlflow reads it: mlflow retries a database it cannot read, then ends in a traceback, and makes
    its tables in any database it is given. Read-only: nothing is written here. An empty file is a new store."""
    if not store.exists():
        return
    if not store.is_file():
        raise BriskError(f"{key}={uri}: {store} is not a file. {fix}", key)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{quote(str(store))}?mode=ro", uri=True, timeout=30)) as db:
            tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.Error as e:
        raise BriskError(f"{key}={uri}: {store} is not an mlflow store ({first_line(e)}). {fix}", key) from None
    if tables and "alembic_version" not in tables:  # mlflow's migrations make it first; mlflow would write here
        shown = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
        raise BriskError(
            f"{key}={uri}: {store} is not an mlflow store (a database with tables {shown} and no "
            f"alembic_version). {fix}",
            key,
        )
    if left := sorted(t for t in tables if t.startswith("_alembic_tmp_")):
        raise BriskError(
            f"{key}={uri}: {store} is half-migrated (a migration of its tables was cut off; {left[0]} is left). {fix}",
            key,
        )


def _open_store(key: str, uri: str, store: Path, spec: Mapping[str, Any], fix: str) -> None:
    """Open the store as the logger will (mlflow's client, which keeps the store for the process): that makes and
    migrates a new one and checks an old one's schema; then the experiment, as Lightning's MLFlowLogger makes it."""
    with _quiet("alembic"):
        import sqlalchemy
        from alembic.util import CommandError
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        try:
            client = MlflowClient(tracking_uri=uri)
            name = spec.get("experiment_name") or "lightning_logs"
            if spec.get("run_id") is None and client.get_experiment_by_name(name) is None:
                client.create_experiment(name, artifact_location=spec.get("artifact_location"))
        except (sqlalchemy.exc.SQLAlchemyError, MlflowException, CommandError, sqlite3.Error) as e:
            raise BriskError(
                f"{key}={uri}: mlflow cannot use the store {store} ({first_line(e)[:300]}). {fix}", key
            ) from None


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """alembic logs each of its plugins at INFO as it is imported (here, or as mlflow migrates a new store): seven
    lines of noise under Hydra's logging. mlflow's own two lines ("Creating initial MLflow database tables...") stay:
    they say why the run pauses."""
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        log.setLevel(level)
