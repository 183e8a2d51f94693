"""What the tests share: tiny configs, entry points run in process and as subprocesses, folder snapshots,
running without root's rights. Fixtures are in conftest.py."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import open_dict
from PIL import Image

import brisk
from brisk.cli import CONFIG_PATH, quote_group_options
from brisk.data import ImageFolderDataModule

# -- tiny configs, and the entry points run in this process or as subprocesses

# Small enough for 2 cores, big enough to learn: 2000 generated images, a width-8 CNN.
TINY = [
    "data=synthetic",
    "data.synthetic.n_train=2000",
    "data.synthetic.n_test=500",
    "data.val_size=500",
    "data.batch_size=100",
    "model.net.width=8",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_model_summary=false",
    "trainer.log_every_n_steps=5",
]


# A global batch that gives the same gradient however it is split (tests/run/test_equivalence.py): no BatchNorm, no
# augmentation, a fixed seed.
EXACT = [*TINY, "augment=none", "+model.net.norm=false", "scheduler=none", "trainer.max_epochs=1"]
EXACT += ["callbacks.progress_bar=null", "trainer.deterministic=true"]
# EXACT on 2 ranks of 50, each holding its data resident: the 2-rank run test_distributed.py and test_equivalence.py
# share (conftest.py: ddp_run).
EXACT_DDP = [*EXACT, "data.batch_size=100", "strategy=ddp", "trainer.devices=2", "data.resident=true"]


# What srun sets for a one-task job: enough for Lightning to pick its SLURMEnvironment.
SLURM_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "brisk",
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_NNODES": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}


# A finished 1-epoch run on a generated set other than the default one (seed 3).
FINISHED = [*TINY, "data.synthetic.seed=3", "trainer.max_epochs=1", "callbacks.progress_bar=null"]


def processes_of(root: Path) -> list[int]:
    """Processes whose environment names this project root: anything brisk started for a test."""
    marker = f"BRISK_ROOT={root}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def compose_cfg(overrides: list[str], root: Path, config_name: str = "train", config_dir: str = CONFIG_PATH):
    """The config brisk-train would see, with the hydra-runtime paths pinned to `root`."""
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=quote_group_options([f"paths.root_dir={root}", *overrides]))
    with open_dict(cfg):
        cfg.paths.output_dir = str(root / "out")
    return cfg


def run_cli(
    module: str,
    overrides: list[str],
    root: Path,
    timeout: float = 240,
    check: bool = True,
    env=None,
    package="brisk",
    **kw,
):
    """Run `python -m <package>.<module> overrides...` with the project root at `root` (and `env` over os.environ)."""
    env = {**(env or os.environ), "BRISK_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", f"{package}.{module}", *overrides],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{package}.{module} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def run_dir_of(proc) -> Path:
    """The run directory: the last line brisk prints."""
    return Path(proc.stdout.strip().splitlines()[-1])


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def main_in_process(module: str, overrides: list[str], root: Path) -> int:
    """`brisk-<module> overrides...` in this process, through its real Hydra entry point (composition, run
    directory, .hydra/), with the project root at `root`. Returns the exit status: 0, or 2 for a BriskError."""
    import importlib

    from hydra.core.global_hydra import GlobalHydra

    saved_argv, saved_handlers = sys.argv, logging.getLogger().handlers[:]
    deterministic = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    sys.argv = [f"brisk-{module}", f"paths.root_dir={root}", *overrides]  # the entry point puts a -m first
    os.environ["HYDRA_FULL_ERROR"] = "1"  # a bug raises here instead of Hydra's exit 1
    try:
        importlib.import_module(f"brisk.{module}").main()
        return 0
    except SystemExit as e:
        return e.code
    finally:
        sys.argv = saved_argv
        del os.environ["HYDRA_FULL_ERROR"]
        GlobalHydra.instance().clear()
        # trainer.deterministic=true turns it on for the process: the tests after this one run as they would
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        for handler in logging.getLogger().handlers[:]:  # Hydra's file handler would take other tests' logs
            if handler not in saved_handlers:
                logging.getLogger().removeHandler(handler)
                handler.close()


def main_printing(module: str, overrides: list[str], root: Path) -> subprocess.CompletedProcess:
    """main_in_process, with what it prints to stdout kept (stderr goes where it went): for a fixture wider than a
    test, where capsys is not available. Fails unless it exits 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main_in_process(module, overrides, root)
    assert code == 0, f"brisk-{module} exited {code}:\n{out.getvalue()[-3000:]}"
    return subprocess.CompletedProcess([f"brisk-{module}", *overrides], code, out.getvalue(), "")


def bare_trainer(**kwargs):
    """A one-process CPU Trainer with Lightning's extras off (logger, checkpoints, bar, summary): for tests of
    a single callback or hook. Keyword arguments go to the Trainer."""
    import lightning as L

    defaults = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return L.Trainer(**{**defaults, **kwargs})


# -- a refused command


def assert_user_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, no traceback, and the last line of stderr is the one error line, holding every needle."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("brisk: error:")]
    assert errors == [lines[-1]], proc.stderr[-3000:]
    for needle in needles:
        assert needle in lines[-1]
    return lines[-1]


# -- folders before and after, rights, brisk-train in this process

BASE = [*TINY, "trainer.max_epochs=1", "callbacks.progress_bar=null", "scheduler=none", "data.batch_size=500"]


RUNS = Path("logs/train/runs")


def tree(folder: Path) -> dict[str, str]:
    """Every file (by content hash), link (by its target) and folder under `folder`: what "unchanged" is checked
    against."""
    found = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            found[str(p.relative_to(folder))] = f"-> {os.readlink(p)}"
        else:
            found[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return found


NOBODY = 65534


CAP_DAC_READ_SEARCH = 2  # linux/capability.h: read any file and search any folder, whatever its mode


def checkout_reachable() -> bool:
    """Whether nobody can read this checkout (its conf/, its .venv): not when it sits inside a folder only root may
    enter, such as /root or a mktemp -d folder."""
    if os.geteuid() != 0:
        return True
    os.seteuid(NOBODY)
    try:
        return all(os.access(p, os.R_OK | os.X_OK, effective_ids=True) for p in (CONFIG_PATH, sys.prefix))
    finally:
        os.seteuid(0)


def _read_anything() -> None:
    """Give this thread back CAP_DAC_READ_SEARCH after the drop to nobody (capset(2), as libcap does), so it can
    still import and read the checkout, while every write is judged by nobody's rights."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    if libc.capget(ctypes.byref(header), data) or not data[0].permitted & (1 << CAP_DAC_READ_SEARCH):
        raise OSError(ctypes.get_errno(), "capget: CAP_DAC_READ_SEARCH is not permitted here")
    data[0].effective |= 1 << CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(header), data):
        raise OSError(ctypes.get_errno(), "capset")


@contextlib.contextmanager
def without_rights():
    """Run as a user the chmod bits apply to: root ignores them, so drop to nobody (effective uid only). Where
    nobody cannot reach the checkout, reading stays allowed (CAP_DAC_READ_SEARCH): only writes are nobody's."""
    if os.geteuid() != 0:
        yield
        return
    reachable = checkout_reachable()
    os.seteuid(NOBODY)
    try:
        if not reachable:
            _read_anything()
        yield
    finally:
        os.seteuid(0)  # back to root: the effective capabilities are the permitted ones again


def brisk_train(argv: list[str], root: Path, capsys, monkeypatch) -> subprocess.CompletedProcess:
    """brisk-train's console entry point, in this process: the exit status and what it printed."""
    if any(a.startswith("data=") for a in argv[len(BASE) :]):  # another dataset: drop BASE's synthetic keys
        argv = [a for a in argv[: len(BASE)] if not a.startswith("data")] + argv[len(BASE) :]
    return brisk_main("train", argv, root, capsys, monkeypatch)


def brisk_main(module: str, argv: list[str], root: Path, capsys, monkeypatch) -> subprocess.CompletedProcess:
    """brisk-<module>'s console entry point, in this process: the exit status and what it printed."""
    import importlib

    monkeypatch.setenv("BRISK_ROOT", str(root))
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "argv", [f"brisk-{module}", *argv])
    capsys.readouterr()
    try:
        importlib.import_module(f"brisk.{module}").main()
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out.out, out.err)


# -- image folders


def rgb(seed: int, h: int = 32, w: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def write(path: Path, array: np.ndarray, mode: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(array)
    (image.convert(mode) if mode else image).save(path)
    return path


def folder(root: Path, per_class: int = 6, classes=("cat", "dog", "eel"), split: str = "train", seed: int = 0):
    for c, name in enumerate(classes):
        for i in range(per_class):
            write(root / split / name / f"{i}.png", rgb(seed + 100 * c + i))
    return root


def module(root: Path, **kw) -> ImageFolderDataModule:
    kw.setdefault("val_size", 0)
    dm = ImageFolderDataModule(root=str(root), batch_size=4, **kw)
    dm.prepare_data()
    dm.setup("fit")
    return dm


# -- subprocesses that import the tests' own modules


def env_with_tests() -> dict:
    """signal_at importable, and this brisk (the one under test, not an installed one) first."""
    paths = [str(Path(__file__).parent), str(Path(brisk.__file__).parents[1])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


# -- a call that must not hang


@contextlib.contextmanager
def deadline(seconds: float = 10.0):
    """Fail the test, instead of hanging the suite, if the block takes longer than `seconds`: SIGALRM interrupts even
    a blocking open() of a FIFO or a read of /dev/zero (in the main thread, where pytest runs tests)."""
    import signal

    def expired(signum, frame):
        raise AssertionError(f"still running after {seconds} s: it hangs")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
