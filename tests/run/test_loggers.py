"""Every logger of conf/logger/ on one tiny run, read back from what each wrote; the console that run prints."""

from __future__ import annotations

import csv
import importlib.util
import logging
import os
import re
import struct
import warnings
from pathlib import Path

import pytest

from brisk.errors import BriskError
from brisk.run import loggers
from brisk.utils import quiet
from helpers import BASE, brisk_train, processes_of, read_summary

LOGGERS = ("tensorboard", "mlflow", "wandb")
missing = [m for m in LOGGERS if importlib.util.find_spec(m) is None]


def wandb_records(path: Path):
    """The records of a .wandb file: wandb's transaction log is LevelDB's log format (32 KiB blocks of chunks, each
    with a 7-byte header: crc32, length, type) after a 7-byte header of its own, each record a protobuf Record."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert struct.unpack("<4sHB", data[:7]) == (b":W&B", 0xBEE1, 0)
    pos, chunks = 7, []
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zeros: the end of what was written
            break
        chunks.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a record is complete
            record = Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            yield record


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


def last_value(rows, key: str) -> float:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")][-1]


@pytest.mark.skipif(bool(missing), reason=f"the loggers extra is not installed ({', '.join(missing)})")
def test_every_logger_records_the_run_and_the_console_stays_quiet(
    brisk_root, tmp_path, capfd, caplog, recwarn, monkeypatch, restore_logging
):
    """One run with all four loggers and the progress bar: each logger holds the run's val/acc and test/acc, as
    summary.json does; the last line printed is the run directory, after wandb's closing lines; no Lightning tip,
    no v_num, no 0.00it/s. The session's root: its mlflow store (logs/mlflow.db) is built once for the session."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for var, sub in [("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data")]:
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / sub))  # nothing written to ~/.config or ~/.cache
    monkeypatch.setenv("WANDB_MODE", "offline")
    base = [a for a in BASE if a != "callbacks.progress_bar=null"]
    run_dir = tmp_path / "run"
    argv = [*base, "logger=[csv,tensorboard,mlflow,wandb]", f"hydra.run.dir={run_dir}"]
    import wandb

    try:
        proc = brisk_train(argv, brisk_root, capfd, monkeypatch)
        left_open = wandb.run  # brisk-train ends its wandb run before it prints the run directory
    finally:
        if wandb.run is not None:
            wandb.run.finish()
        wandb.teardown()  # wandb's service process, which would stay until pytest exits
    assert not [p for p in processes_of(brisk_root) if b"wandb" in cmdline(p)], "wandb's service left running"
    assert left_open is None
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = read_summary(run_dir)["metrics"]
    val_acc, test_acc = metrics["val/acc"], metrics["test/acc"]

    with open(next(run_dir.glob("csv/version_*/metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    assert (last_value(rows, "val/acc"), last_value(rows, "test/acc")) == pytest.approx((val_acc, test_acc))

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tb = {tag: events.Scalars(tag)[-1].value for tag in ("val/acc", "test/acc")}
    assert (tb["val/acc"], tb["test/acc"]) == pytest.approx((val_acc, test_acc))

    client = MlflowClient(tracking_uri=f"sqlite:///{brisk_root}/logs/mlflow.db")
    experiment = client.get_experiment_by_name("brisk")
    (run,) = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    assert run.info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "val/acc")] == pytest.approx([val_acc])
    assert run.data.metrics["test/acc"] == pytest.approx(test_acc)

    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    records = list(wandb_records(log))
    # wandb splits a key at its slashes: val/acc is nested_key ["val", "acc"]
    history = [
        {"/".join(i.nested_key) or i.key: i.value_json for i in r.history.item}
        for r in records
        if r.HasField("history")
    ]
    assert (last_value(history, "val/acc"), last_value(history, "test/acc")) == pytest.approx((val_acc, test_acc))
    assert records[-1].HasField("exit")

    out = proc.stdout.strip().splitlines()
    assert out[-1] == str(run_dir), out[-5:]
    assert "wandb sync" in proc.stdout + proc.stderr  # wandb's closing lines: printed, and before the last line
    console = proc.stdout + proc.stderr + caplog.text  # caplog: where pytest's handlers took log lines instead
    assert "Tip:" not in console and "v_num" not in console and "LeafSpec" not in console
    assert "it/s" in console
    assert not re.search(r"(?<![\d.])0\.00it/s", console), "a rate of zero: 20.00it/s must not count as 0.00it/s"
    warned = [str(w.message) for w in recwarn]
    assert not [m for m in warned if "LeafSpec" in m]
    # The logging interval follows the epoch's length (brisk.data.base), so Lightning has nothing to warn of.
    assert not [m for m in warned if "smaller than the logging interval" in m]


def test_quiet_drops_only_the_known_lines():
    """The filters drop the messages they name and nothing else: another warning, another metric's sync_dist advice
    and another log line of the same logger still come through."""
    lightning_log = logging.getLogger(quiet.LOGGER)
    other_metric = "It is recommended to use `self.log('val/f1', ..., sync_dist=True)` when logging on epoch level"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet.quiet()
        quiet.quiet()  # twice: nothing added twice
        assert lightning_log.filters.count(quiet.known_harmless) == 1
        warnings.warn(
            "It is recommended to use `self.log('val/acc_best', ..., sync_dist=True)` when ...",
            UserWarning,
            stacklevel=2,
        )
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning, stacklevel=2)
        warnings.warn(other_metric, UserWarning, stacklevel=2)
        warnings.warn("something brisk has never seen", UserWarning, stacklevel=2)
    assert [str(w.message) for w in seen] == [other_metric, "something brisk has never seen"]

    def passes(message: str) -> bool:
        return bool(lightning_log.filter(logging.makeLogRecord({"msg": message, "levelno": logging.INFO})))

    assert not passes("💡 Tip: For seamless cloud logging and experiment tracking, try installing ...")
    assert passes("GPU available: False, used: False")


def test_a_logger_folder_that_cannot_be_made_is_refused_without_making_it(tmp_path):
    """A save_dir under a file is refused as the logger is built, in one line naming its key; one that can be made
    passes, and finding out makes nothing (a refused run leaves nothing behind)."""
    (tmp_path / "afile").write_text("")
    for folder in (tmp_path / "afile", tmp_path / "afile" / "csv" / "deeper"):
        with pytest.raises(
            BriskError, match=r"^logger\.csv\.save_dir=\S*afile\S*: \S*afile is a file, not a folder"
        ) as refused:
            loggers.check("logger.csv", {"type": "csv", "save_dir": str(folder)})
        assert refused.value.key == "logger.csv.save_dir"
    before = sorted(tmp_path.rglob("*"))
    loggers.check("logger.tensorboard", {"type": "tensorboard", "save_dir": str(tmp_path / "new" / "tensorboard")})
    loggers.check("logger.csv", {"type": "csv", "save_dir": str(tmp_path)})
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_a_logger_folder_in_a_read_only_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(BriskError, match=r"cannot write in \S*locked \(Permission denied\)") as refused:
            loggers.check("logger.csv", {"type": "csv", "save_dir": str(locked / "csv")})
        assert refused.value.key == "logger.csv.save_dir"
    finally:
        locked.chmod(0o700)


@pytest.fixture
def wandb_alone(tmp_path, monkeypatch):
    """wandb with no credentials and no mode from the environment, its folders and ~ in tmp_path, its server a
    host of its own (a ~/.netrc entry is per host); its settings, which it reads once a process, read anew."""
    wandb = pytest.importorskip("wandb")
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE", "WANDB_DISABLED", "NETRC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.com")
    wandb.teardown()
    yield wandb
    wandb.teardown()


def test_wandb_online_needs_a_key_where_wandb_looks_for_one(wandb_alone, tmp_path, monkeypatch):
    """Refused in one line naming logger.wandb and the fixes, as the logger is built; not refused where wandb
    would find a key (WANDB_API_KEY, the ~/.netrc entry `wandb login` writes) or needs none (offline)."""
    spec = {"type": "wandb", "project": "brisk"}

    def checked(**given) -> BriskError | None:
        wandb_alone.teardown()  # wandb reads its environment once
        try:
            loggers.check("logger.wandb", {**spec, **given})
        except BriskError as e:
            return e
        return None

    refused = checked()
    assert refused is not None and refused.key == "logger.wandb"
    assert str(refused).startswith("logger.wandb: ")
    assert all(fix in str(refused) for fix in ("WANDB_API_KEY", "WANDB_MODE=offline", "logger.wandb.offline=true"))
    assert checked(offline=True) is None
    assert checked(mode="disabled") is None
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert checked() is None
    monkeypatch.delenv("WANDB_MODE")
    netrc = tmp_path / ".netrc"
    netrc.write_text(f"machine wandb.example.com\n  login user\n  password {'k' * 40}\n")
    netrc.chmod(0o600)
    assert checked() is None
    netrc.unlink()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert checked() is None
