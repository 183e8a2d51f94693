"""Where a search keeps its study: `hydra.sweeper.storage`, opened and proven usable before the search writes.

A search that cannot record its trials would fail after its first trial has trained, with a database
traceback: so the sweeper opens the storage first, checks that its driver is installed, that it is a
database it can read, and that it may write there (a write that is rolled back), and only then creates
its sweep directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from brisk.errors import BriskError
from brisk.utils.files import creatable, nearest_existing

KEY = "hydra.sweeper.storage"
SQLITE = "sqlite:///"
# SQLite's messages for the errors brisk explains, for Pythons before 3.11 (no sqlite_errorname).
SQLITE_ERRORS = {
    "file is not a database": "SQLITE_NOTADB",
    "database disk image is malformed": "SQLITE_CORRUPT",
    "attempt to write a readonly database": "SQLITE_READONLY",
    "unable to open database file": "SQLITE_CANTOPEN",
}
# The pip package of each DB-API module SQLAlchemy imports for a URL, where the two names differ.
PACKAGES = {"MySQLdb": "mysqlclient", "pymysql": "PyMySQL", "psycopg": "psycopg", "psycopg2": "psycopg2-binary"}


def url_of(storage: str | None, sweep_dir: str | Path) -> str:
    """`hydra.sweeper.storage`, or a SQLite file in the sweep directory: pruning needs a storage that the
    trials can reach from their own processes, and an in-memory study cannot be."""
    if storage is None:
        return f"{SQLITE}{Path(sweep_dir).resolve() / 'optuna.db'}"
    if not isinstance(storage, str) or "://" not in storage or storage in ("sqlite://", f"{SQLITE}:memory:"):
        raise BriskError(
            f"{KEY}={storage} is not a database URL the trials can reach. Use e.g. {KEY}={SQLITE}logs/optuna.db, "
            "or a PostgreSQL/MySQL URL that every node can reach."
        )
    return storage


def open_storage(url: str, heartbeat: dict | None = None):
    """The study's storage, as each trial opens it to report; `heartbeat`: RDBStorage's heartbeat arguments."""
    import optuna

    kwargs = {}
    if url.startswith(SQLITE):
        # Trials of a parallel search write their reports at the same time: wait for the lock instead of failing.
        kwargs = {"connect_args": {"timeout": 60}}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, **(heartbeat or {}))


def open_checked(url: str, heartbeat: dict | None = None):
    """The sweeper's storage, refused with a BriskError unless it is a database this process may write.
    A SQLite file's missing folders are created here, and removed again if the storage is refused."""
    if not url.startswith(SQLITE):
        return _usable(url, heartbeat)
    path = Path(url.removeprefix(SQLITE))
    if not path.parent.is_dir():  # mkdir(parents=True) fails partway on a name too long, with folders made
        creatable(path.parent, KEY)
    base = nearest_existing(path.parent)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # what no check foresees: a quota, a folder made or removed meanwhile
            raise BriskError(
                f"{KEY}={url}: cannot create the folder {path.parent} ({e.strerror}). Use a storage in a "
                "folder you can write to."
            ) from None
        with locked(url):
            return _usable(url, heartbeat)
    except BriskError:
        if base != path.parent:
            shutil.rmtree(base / path.parent.relative_to(base).parts[0], ignore_errors=True)
        raise


@contextlib.contextmanager
def locked(url: str):
    """Steps of the searches on one SQLite file, one at a time: a lock on the file's folder (which leaves no file
    behind). Two searches that open a new file at once would both create Optuna's tables, and one fails ("table
    ... already exists"); two that count the budget at once would both ask its last trial. Other databases get
    no lock: there each search may ask one batch beyond the budget (brisk.search.loop)."""
    if not url.startswith(SQLITE):
        yield
        return
    try:
        fd = os.open(Path(url.removeprefix(SQLITE)).parent, os.O_RDONLY)
    except OSError:  # a folder this user may not list: SQLite will say so, in the check that follows
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _usable(url: str, heartbeat: dict | None):
    import sqlalchemy
    from optuna.exceptions import StorageInternalError

    safe = shown(url)
    try:
        storage = open_storage(url, heartbeat)
        with storage.engine.connect() as connection, connection.begin() as transaction:
            # A write that is never committed: proves write access (file, folder, database user) and changes nothing.
            connection.execute(sqlalchemy.text("INSERT INTO studies (study_name) VALUES ('brisk write check')"))
            transaction.rollback()
        return storage
    except ImportError as e:
        module = getattr(e.__cause__, "name", None) or getattr(e, "name", None) or "its driver"
        package = PACKAGES.get(module, module.partition(".")[0])
        raise BriskError(
            f"{KEY}={safe}: the database driver {module} is not installed. Install it (pip install {package}), "
            "or name an installed driver in the URL (e.g. mysql+pymysql://...)."
        ) from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise BriskError(
            f"{KEY}={safe}: SQLAlchemy knows no database of that name. Use e.g. {SQLITE}logs/optuna.db, "
            "postgresql://user@host/db or mysql://user@host/db."
        ) from None
    except (sqlalchemy.exc.DBAPIError, StorageInternalError) as e:  # Optuna wraps what fails in its sessions
        error = e if isinstance(e, sqlalchemy.exc.DBAPIError) else e.__cause__
        raise BriskError(f"{KEY}={safe}: {_advice(url, getattr(error, 'orig', e))}") from None
    except RuntimeError as e:  # Optuna: the tables were made by another Optuna version; the text names the fix
        raise BriskError(f"{KEY}={safe}: {e}") from None


def _advice(url: str, error: BaseException) -> str:
    """What a database error means and what to do about it. SQLite's error names (Python 3.11+), or else its
    fixed messages, tell its cases apart."""
    if not url.startswith(SQLITE):
        return (
            f"cannot write to the database ({error}). Check that the server is up, and that this user may create "
            "and write tables there."
        )
    name = getattr(error, "sqlite_errorname", None) or SQLITE_ERRORS.get(str(error), "")
    path = Path(url.removeprefix(SQLITE))
    if name == "SQLITE_NOTADB" or name.startswith("SQLITE_CORRUPT"):
        return (
            f"{path} is not a readable SQLite database ({error}). Point {KEY} at another file, "
            "or move this one away to start a new study in its place."
        )
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")) and path.parent.is_dir() and not path.is_dir():
        if not _writable(path.parent):
            return (
                f"cannot write in the folder {path.parent} ({error}), where SQLite keeps its journal beside the "
                "database. Make the folder writable, or use a storage in a folder you can write to."
            )
        if name.startswith("SQLITE_READONLY"):
            return f"{path} is read-only ({error}). Make it writable (chmod u+w {path}), or use another file."
    return f"cannot use {path} as a SQLite database ({error}). Use another file."


def _writable(folder: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=folder):  # unnamed where the system allows: leaves no trace
            return True
    except OSError:
        return False


def shown(url: str) -> str:
    import sqlalchemy

    try:
        return sqlalchemy.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url
