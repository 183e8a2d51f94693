"""brisk-train in the background, to be signalled partway through: start it, wait for a checkpoint, kill it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch


@contextlib.contextmanager
def background_train(overrides: list[str], root: Path, env: dict | None = None) -> Iterator[subprocess.Popen]:
    """`python -m brisk.train` in its own process group, which is killed on the way out whatever happens.

    Output goes to files, not pipes: a pipe nobody reads until the end would fill up and stall the run."""
    env = {**(env or os.environ), "BRISK_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "brisk.train", *overrides],
            cwd=root,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        proc.output = lambda: (_read(out), _read(err))
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _read(f) -> str:
    f.seek(0)
    return f.read()


def checkpoint_step(path: Path) -> int | None:
    """The global step saved in `path`, or None while it does not exist yet.

    brisk replaces checkpoints by rename, so a file that exists is always complete."""
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


def wait_for_step(proc: subprocess.Popen, ckpt: Path, min_step: int, timeout: float = 120) -> int:
    """Wait until `ckpt` holds global step >= min_step; fail if the run ends or stalls first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step = checkpoint_step(ckpt)
        if step is not None and step >= min_step:
            return step
        if proc.poll() is not None:
            err = proc.output()[1][-3000:]
            raise AssertionError(f"the run ended ({proc.returncode}) before step {min_step}:\n{err}")
        time.sleep(0.01)
    raise AssertionError(f"no checkpoint with step >= {min_step} in {timeout} s")


def stop(proc: subprocess.Popen, sig: int, timeout: float = 120) -> tuple[int, str, str]:
    """Send `sig` to the run's process group; return its exit status and output."""
    os.killpg(proc.pid, sig)
    proc.wait(timeout=timeout)
    return proc.returncode, *proc.output()
