"""Hostile and unlucky inputs, one table: each is refused with exit status 2 and one `brisk: error:` line
naming the key or file, no traceback, no run directory left behind, and a resume target unchanged to the
byte. The cases run brisk-train's real entry point (Hydra included) in this process; the lock is
tested against a real second process.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from brisk import train
from brisk.cli import user_errors
from brisk.data import cifar_files as cf
from brisk.data import synthetic as syn
from helpers import (
    BASE,
    RUNS,
    assert_user_error,
    brisk_train,
    checkout_reachable,
    compose_cfg,
    tree,
    without_rights,
)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, brisk_root) -> Path:
    """A real run directory (one short epoch, checkpoints written) to copy as a resume target."""
    root = tmp_path_factory.mktemp("finished")
    (brisk_root / "data").mkdir(exist_ok=True)
    (root / "data").symlink_to(brisk_root / "data", target_is_directory=True)
    handlers = logging.getLogger().handlers[:]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BRISK_ROOT", str(root))
        mp.chdir(root)
        mp.setattr(sys, "argv", ["brisk-train", *BASE])
        train.main()
    for h in logging.getLogger().handlers[:]:
        if h not in handlers:
            logging.getLogger().removeHandler(h)
            h.close()
    (run,) = (root / RUNS).iterdir()
    return run


# Each case: a function of the project root that prepares files and returns (overrides, needles).
# Overrides come after BASE; every needle must be in the error line.
def _args(*overrides: str, needles: tuple[str, ...]) -> Callable[[Path], tuple[list[str], tuple[str, ...]]]:
    return lambda root: (list(overrides), needles)


def _resume(edit: Callable[[Path], None] | None, *overrides: str, needles: tuple[str, ...]):
    """A resume into a copy of a finished run, after `edit` damages the copy."""

    def make(root: Path):
        run = root / "target"
        shutil.copytree(root / "finished", run, symlinks=True)
        if edit is not None:
            edit(run)
        return ["ckpt_path=last", f"hydra.run.dir={run}", *overrides], needles

    return make


def _data(edit: Callable[[Path], None], *overrides: str, needles: tuple[str, ...]):
    """data=cifar10 pointed at a private copy of a small valid set, after `edit` damages it."""

    def make(root: Path):
        data = root / "set"
        shutil.copytree(root / "good_set", data)
        edit(data / cf.FOLDER)
        overrides_ = ["data=cifar10", f"data.root={data}", "data.val_size=10", "data.batch_size=10"]
        return [*overrides_, *overrides], tuple(n.replace("<set>", str(data)) for n in needles)

    return make


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _crafted_checkpoint(run: Path) -> None:
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {run}/pwned",))

    torch.save({"state_dict": {}, "callbacks": Payload()}, run / "checkpoints" / "last.ckpt")


def _bad_labels(folder: Path) -> None:
    images, labels = syn.generate(10, 0, 0.1)
    cf.write_batch(folder / "data_batch_1", images, labels + 20, "x")


def _symlink_loop(root: Path) -> tuple[list[str], tuple[str, ...]]:
    (root / "loop").symlink_to(root / "loop")
    return ["data=cifar10", f"data.root={root / 'loop'}"], ("data.root=", "Too many levels of symbolic links")


def _root_is_a_file(root: Path) -> tuple[list[str], tuple[str, ...]]:
    (root / "afile").write_text("not a folder")
    return ["data=cifar10", f"data.root={root / 'afile'}"], ("data.root=", "is a file, not a folder")


def _empty_data_folder(root: Path) -> tuple[list[str], tuple[str, ...]]:
    (root / "empty").mkdir()
    return ["data=cifar10", f"data.root={root / 'empty'}", "data.download=false"], ("CIFAR-10 not found", "empty")


def _run_dir_under_a_file(root: Path) -> tuple[list[str], tuple[str, ...]]:
    (root / "afile").write_text("")
    return [f"hydra.run.dir={root / 'afile' / 'run'}"], ("hydra.run.dir=", "is a file, not a folder")


def _log_dir_under_a_file(root: Path) -> tuple[list[str], tuple[str, ...]]:
    (root / "afile").write_text("")
    return [f"paths.log_dir={root / 'afile' / 'logs'}"], ("paths.log_dir=", "is a file, not a folder")


def _non_utf8_data_root(root: Path) -> tuple[list[str], tuple[str, ...]]:
    name = os.fsdecode(b"data-\xff\xfe")  # not UTF-8: Python carries it as surrogate escapes
    (root / name).write_bytes(b"")
    return ["data=cifar10", f"data.root={root / name}"], ("data.root=", "not UTF-8")


def _locked(root: Path) -> tuple[list[str], tuple[str, ...]]:
    run = root / "busy"
    run.mkdir()
    fd = os.open(run, os.O_RDONLY)  # another holder of the run directory's lock (a second open file)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _held.append(fd)
    return [f"hydra.run.dir={run}"], ("hydra.run.dir=", "is in use by a running brisk process")


_held: list[int] = []

CASES = {
    # config values of the wrong type or range
    "max_epochs_zero": _args("trainer.max_epochs=0", needles=("trainer.max_epochs=0", ">= 1")),
    "max_steps_zero": _args("trainer.max_steps=0", needles=("trainer.max_steps=0",)),
    "max_epochs_string": _args("trainer.max_epochs=ten", needles=("trainer.max_epochs=ten:", "Integer")),
    "max_epochs_float": _args("trainer.max_epochs=1.5", needles=("trainer.max_epochs=1.5",)),
    "max_epochs_inf": _args("trainer.max_epochs=inf", needles=("trainer.max_epochs=inf",)),
    "val_size_negative": _args("data.val_size=-1", needles=("data.val_size=-1", ">= 0")),
    "val_size_string": _args("data.val_size=half", needles=("data.val_size=half",)),
    "val_size_whole_split": _args("data.val_size=2000", needles=("data.val_size=2000", "1999")),
    "lr_string": _args("optimizer.lr=fast", needles=("optimizer.lr='fast'", "positive number")),
    "lr_zero": _args("optimizer.lr=0", needles=("optimizer.lr=0", "positive")),
    "lr_negative": _args("optimizer.lr=-0.1", needles=("optimizer.lr=-0.1", "positive")),
    "lr_inf": _args("optimizer.lr=inf", needles=("optimizer.lr=inf",)),
    "lr_nan": _args("optimizer.lr=nan", needles=("optimizer.lr=nan",)),
    "label_smoothing_one": _args("model.label_smoothing=1.0", needles=("model.label_smoothing=1.0", "[0, 1)")),
    "label_smoothing_negative": _args("model.label_smoothing=-0.1", needles=("model.label_smoothing=-0.1",)),
    "crop_pad_negative": _args("data.augment.crop_pad=-4", needles=("data.augment.crop_pad=-4",)),
    "flip_not_bool": _args(
        "data.augment.flip=maybe", needles=("data.augment.flip='maybe'", "true, false or alternate")
    ),
    "resident_not_bool": _args("data.resident=gpu", needles=("data.resident=gpu", "bool")),
    "seed_negative": _args("seed=-1", needles=("seed=-1",)),
    "seed_huge": _args("seed=99999999999999999999", needles=("seed=99999999999999999999",)),
    "batch_bool": _args("data.batch_size=true", needles=("data.batch_size=true",)),
    "batch_zero": _args("data.batch_size=0", needles=("data.batch_size=0",)),
    "devices_negative": _args("trainer.devices=-2", needles=("trainer.devices=-2",)),
    "nodes_zero": _args("trainer.num_nodes=0", needles=("trainer.num_nodes=0",)),
    "log_every_zero": _args("trainer.log_every_n_steps=0", needles=("trainer.log_every_n_steps=0",)),
    "limit_train_zero": _args("trainer.limit_train_batches=0", needles=("trainer.limit_train_batches=0",)),
    "clip_negative": _args("trainer.gradient_clip_val=-1", needles=("trainer.gradient_clip_val=-1",)),
    "momentum_above_one": _args("optimizer.momentum=1.5", needles=("optimizer.momentum=1.5",)),
    "dropout_nan": _args("model.net.dropout=nan", needles=("model.net.dropout=nan",)),
    "exp_decay_nan": _args("scheduler=exp_decay", "scheduler.k=nan", needles=("scheduler.k=nan",)),
    "val_check_zero": _args("trainer.val_check_interval=0", needles=("trainer.val_check_interval=0",)),
    # Lightning finds it once fit counts the batches (3 here): its own ValueError, named by the key
    "val_check_beyond_the_epoch": _args(
        "trainer.val_check_interval=5000", needles=("trainer.val_check_interval=5000", "Lightning refused")
    ),
    "swa_after_the_last_epoch": _args(
        "callbacks=swa", "callbacks.swa.swa_epoch_start=5", needles=("callbacks.swa.swa_epoch_start=5",)
    ),
    "step_size_zero": _args("scheduler=step", "scheduler.step_size=0", needles=("scheduler.step_size=0",)),
    # torch's AdamW indexes betas[1]: its IndexError, raised in torch, is the value's fault, not a bug of brisk's
    "betas_too_short": _args("optimizer=adamw", "optimizer.betas=[0.9]", needles=("optimizer.betas=[0.9]", "AdamW")),
    # Lightning's Timer quotes the value, not the key: the one override it quotes is named
    "max_time_word": _args("trainer.max_time=abc", needles=("brisk: error: trainer.max_time: ", "DD:HH:MM:SS")),
    "width_zero": _args("model.net.width=0", needles=("model.net.width=0",)),
    "synthetic_size_odd": _args("data.synthetic.n_train=2001", needles=("data.synthetic.n_train=2001", "5")),
    "every_n_steps_negative": _args(
        "callbacks.last_checkpoint.every_n_train_steps=-5", needles=("every_n_train_steps=-5",)
    ),
    "precision_unknown": _args("trainer.precision=banana", needles=("trainer.precision=banana",)),
    # config groups and options that do not exist
    # a key of a group option not picked (conf/callbacks/early_stopping.yaml): the option is named
    "option_not_picked": _args(
        "callbacks.early_stopping.patience=2", needles=("callbacks.early_stopping:", "add callbacks=early_stopping")
    ),
    # Lightning names the argument in backquotes, in a message about MPSAccelerator
    "accelerator_absent": _args("trainer.accelerator=mps", needles=("brisk: error: trainer.accelerator: ",)),
    "unknown_model": _args("model=nope", needles=("model=nope", "simple_cnn")),
    "unknown_accumulation": _args("accumulation=3", needles=("accumulation=3", "no such option")),
    "unknown_in_sweep_list": _args("optimizer=sgd,adamm", needles=("optimizer=adamm",)),
    # sizes
    "batch_larger_than_split": _args(
        "data.batch_size=1600", needles=("data.batch_size=1600", "1500 images", "data.val_size=500")
    ),
    # resuming
    "last_without_run_dir": _args("ckpt_path=last", needles=("ckpt_path=last", "hydra.run.dir=")),
    "missing_checkpoint_file": _args("ckpt_path=nowhere.ckpt", needles=("ckpt_path=nowhere.ckpt", "no such file")),
    "last_in_a_run_without_checkpoints": _resume(
        lambda run: shutil.rmtree(run / "checkpoints"), needles=("ckpt_path=last", "no last checkpoint")
    ),
    "crafted_checkpoint": _resume(_crafted_checkpoint, needles=("refused", "Python object", "last.ckpt")),
    "truncated_checkpoint": _resume(
        lambda run: _truncate(run / "checkpoints" / "last.ckpt"), needles=("last.ckpt", "truncated")
    ),
    "text_as_checkpoint": _resume(
        lambda run: (run / "checkpoints" / "last.ckpt").write_text("hello\n"), needles=("last.ckpt", "corrupt")
    ),
    "checkpoints_is_a_file": _resume(
        lambda run: (shutil.rmtree(run / "checkpoints"), (run / "checkpoints").write_text("")),
        needles=("ckpt_path=last", "no last checkpoint"),
    ),
    "resume_with_bad_value": _resume(None, "optimizer.lr=-1", needles=("optimizer.lr=-1",)),
    # output paths
    "run_dir_under_a_file": _run_dir_under_a_file,
    "log_dir_under_a_file": _log_dir_under_a_file,
    "run_dir_locked": _locked,
    # data paths and files
    "data_root_is_a_file": _root_is_a_file,
    "data_root_symlink_loop": _symlink_loop,
    "data_root_empty": _empty_data_folder,
    "data_root_not_utf8": _non_utf8_data_root,
    "test_split_truncated": _data(lambda f: _truncate(f / "test_batch"), needles=("test_batch", "not a readable")),
    "test_split_missing": _data(lambda f: (f / "test_batch").unlink(), needles=("test_batch", "missing")),
    "train_batch_crafted": _data(
        lambda f: (f / "data_batch_2").write_bytes(b"cos\nsystem\n(S'touch pwned'\ntR."),
        needles=("data_batch_2", "refusing to load os.system"),
    ),
    "labels_out_of_range": _data(_bad_labels, needles=("data_batch_1", "outside 0..9")),
}


@pytest.fixture(scope="module")
def good_set(tmp_path_factory) -> Path:
    return syn.write(tmp_path_factory.mktemp("good") / "set", n_train=50, n_test=20, seed=3)


@pytest.mark.parametrize("case", CASES)
def test_hostile_input(case, project, finished_run, good_set, capsys, monkeypatch, restore_logging):
    shutil.copytree(finished_run, project / "finished")
    shutil.copytree(good_set, project / "good_set")
    overrides, needles = CASES[case](project)
    before = tree(project)
    try:
        proc = brisk_train([*BASE, *overrides], project, capsys, monkeypatch)
    finally:
        while _held:
            os.close(_held.pop())
    assert_user_error(proc, *needles)
    assert tree(project) == before, "a refused run wrote, removed or changed files"
    assert not (project / "pwned").exists() and not (project / "target" / "pwned").exists()


def test_permission_problems_get_the_right_advice(capsys, monkeypatch, restore_logging, good_set):
    """Folders this user may not write or read: refused up front, no advice to delete anything."""
    base = Path(tempfile.mkdtemp(prefix="brisk-hostile-"))  # outside pytest's private (0700) folders
    try:
        base.chmod(0o755)
        (base / "logs").mkdir(mode=0o777)
        (base / "logs").chmod(0o777)  # mkdir's mode is masked by the umask
        readonly = base / "readonly"
        readonly.mkdir(mode=0o555)
        data = base / "data"
        shutil.copytree(good_set, data)
        (data / cf.FOLDER).chmod(0o000)
        cases = [([f"hydra.run.dir={readonly / 'run'}"], ("hydra.run.dir=", str(readonly), "Permission denied"))]
        if checkout_reachable():  # else nobody may read everything (without_rights), this folder too
            cases.append((["data=cifar10", f"data.root={data}"], ("permission denied", cf.FOLDER, "chmod")))
        for overrides, needles in cases:
            before = tree(base)
            with without_rights():
                proc = brisk_train([*BASE, *overrides], base, capsys, monkeypatch)
            line = assert_user_error(proc, *needles)
            assert "Delete" not in line
            assert tree(base) == before
    finally:
        (base / "data" / cf.FOLDER).chmod(0o755)
        shutil.rmtree(base)


def test_readonly_checkpoints_of_a_resume_target(finished_run, capsys, monkeypatch, restore_logging):
    base = Path(tempfile.mkdtemp(prefix="brisk-hostile-"))
    try:
        base.chmod(0o777)
        run = base / "run"
        shutil.copytree(finished_run, run)
        run.chmod(0o777)
        (run / "checkpoints").chmod(0o555)
        for log in run.glob("*.log"):  # the run's own log stays writable: only checkpoints/ is at fault here
            log.chmod(0o666)
        before = {k: v for k, v in tree(run).items() if not k.endswith(".log")}  # the log may say why
        with without_rights():
            # one more epoch (scheduler=none: allowed): the run would write checkpoints/ again
            args = [*BASE, "trainer.max_epochs=2", "ckpt_path=last", f"hydra.run.dir={run}"]
            proc = brisk_train(args, base, capsys, monkeypatch)
        assert_user_error(proc, "callbacks.", "checkpoints", "Permission denied")
        assert {k: v for k, v in tree(run).items() if not k.endswith(".log")} == before
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize("allocate", [lambda: torch.empty(1 << 62, dtype=torch.uint8), lambda: bytearray(1 << 62)])
def test_out_of_memory_names_the_batch_size(allocate, tmp_path, capsys):
    """A real failed allocation (torch's allocator, then Python's) inside an entry point's task."""
    cfg = compose_cfg(BASE, tmp_path)
    with pytest.raises(SystemExit) as exit_:
        user_errors(lambda cfg: allocate())(cfg)
    err = capsys.readouterr().err
    proc = subprocess.CompletedProcess([], exit_.value.code, "", err)
    assert_user_error(proc, "out of host memory", "data.batch_size=500", "data.batch_size=250")


def test_a_live_run_locks_its_directory_and_a_killed_one_does_not(project, capsys, monkeypatch, restore_logging):
    """A real second process holds the directory; the in-process run is refused and writes nothing there.
    After SIGKILL the kernel has dropped the lock: no stale lock to clean up by hand."""
    run = project / "shared"
    env = {**os.environ, "BRISK_ROOT": str(project)}
    live = subprocess.Popen(
        [sys.executable, "-m", "brisk.train", *BASE, "trainer.max_epochs=100000", f"hydra.run.dir={run}"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(project / "live.err").open("w"),
    )
    try:
        deadline = time.monotonic() + 180
        while not (run / ".hydra" / "config.yaml").is_file():  # written once its checks have passed
            assert live.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        record = (run / ".hydra" / "config.yaml").read_bytes()
        assert live.poll() is None, (project / "live.err").read_text()[-3000:]
        proc = brisk_train([*BASE, f"hydra.run.dir={run}", "model.net.width=16"], project, capsys, monkeypatch)
        assert_user_error(proc, f"hydra.run.dir={run}", "in use")
        assert (run / ".hydra" / "config.yaml").read_bytes() == record
        assert not (run / ".hydra" / "resume-1").exists()
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait(30)
    fd = os.open(run, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the dead run still held it
    finally:
        os.close(fd)


def test_a_resume_keeps_the_original_record(finished_run, project, capsys, monkeypatch, restore_logging):
    run = project / "run"
    shutil.copytree(finished_run, run)
    record = tree(run / ".hydra")
    proc = brisk_train(
        [*BASE, "ckpt_path=last", f"hydra.run.dir={run}", "trainer.max_epochs=2"], project, capsys, monkeypatch
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {k: v for k, v in tree(run / ".hydra").items() if not k.startswith("resume-")} == record
    assert "trainer.max_epochs=2" in (run / ".hydra" / "resume-1" / "overrides.yaml").read_text()


@pytest.mark.parametrize("empty, multirun_last", [("seed=range(0,0)", False), ("seed=range(5,1)", True)])
def test_a_sweep_of_no_values_is_refused_and_writes_nothing(
    empty, multirun_last, project, capsys, monkeypatch, restore_logging
):
    # Hydra launches 0 jobs and exits 0, leaving an empty sweep folder. multirun_last: `-m` after overrides, which
    # Hydra's own argparse refuses ("unrecognized arguments")
    before = tree(project)
    argv = [*BASE, "-m", empty] if multirun_last else ["-m", *BASE, empty]
    proc = brisk_train(argv, project, capsys, monkeypatch)
    assert assert_user_error(proc, "no values").startswith(f"brisk: error: {empty}: ")
    assert tree(project) == before, "a refused sweep wrote, removed or changed files"


@pytest.mark.slow  # trains a job (~10 s); the suite's sweep tests count each job's .hydra/ too
def test_a_sweep_records_each_started_job_and_removes_refused_ones(project, capsys, monkeypatch, restore_logging):
    proc = brisk_train(["-m", *BASE, "trainer.max_epochs=1,0"], project, capsys, monkeypatch)
    assert proc.returncode != 0  # one job failed: Hydra re-raises it after the sweep
    (sweep,) = (project / "logs" / "train" / "multiruns").iterdir()
    assert (sweep / "0" / ".hydra" / "config.yaml").is_file()
    assert not (sweep / "1").exists()
