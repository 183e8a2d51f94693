"""Checkpoint files: a write killed halfway leaves the previous checkpoint intact, and a crafted or damaged
checkpoint is refused by brisk-train and brisk-eval with one error line, without running anything in it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from helpers import TINY, assert_user_error, brisk_main

# A child process that writes one large checkpoint with the named CheckpointIO.
WRITER = """
import sys, torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from brisk.checkpoints.io import SafeCheckpointIO
io = {"safe": SafeCheckpointIO, "lightning": TorchCheckpointIO}[sys.argv[1]]()
io.save_checkpoint({"w": torch.ones(int(sys.argv[3]))}, sys.argv[2])
"""
BIG = 32_000_000  # 128 MB of float32: a write that takes a few hundred ms, long enough to kill it halfway


def leftover(target: Path) -> Path | None:
    """The temporary file of a safe write of `target` (brisk.utils.files.published: a random name, the suffix kept)."""
    return next(target.parent.glob(f".{target.name}.*.tmp{target.suffix}"), None)


def kill_mid_write(io: str, target: Path, env: dict | None = None) -> None:
    """Start writing a new checkpoint over `target` and SIGKILL the writer once the write has begun."""
    old = target.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, io, str(target), str(BIG)], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if io == "safe" and (growing := leftover(target)) and growing.stat().st_size > 0:
                break
            if io == "lightning" and target.stat().st_size != len(old):  # truncated by open(), then growing
                break
            time.sleep(0.001)
        assert proc.poll() is None, "the write finished before it could be interrupted"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


def test_lightning_io_breaks_when_killed_across_filesystems(tmp_path):
    # The control, showing what brisk's IO prevents: Lightning's temp file goes to TMPDIR, and when that is
    # another filesystem than the checkpoints, the final move copies over last.ckpt in place.
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test's folder")
    target = tmp_path / "last.ckpt"
    torch.save({"w": torch.zeros(3)}, target)
    with tempfile.TemporaryDirectory(dir=other) as tmpdir:
        kill_mid_write("lightning", target, env={**os.environ, "TMPDIR": tmpdir})
        leftovers = list(Path(tmpdir).iterdir())
    with pytest.raises((RuntimeError, EOFError, OSError)):
        torch.load(target, weights_only=True)
    assert leftovers, "Lightning's temporary file is not left behind after all"


def test_a_write_killed_halfway_keeps_the_old_checkpoint(tmp_path):
    target = tmp_path / "last.ckpt"
    torch.save({"w": torch.zeros(3)}, target)
    kill_mid_write("safe", target)
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.zeros(3))  # the old one, whole
    partial = leftover(target)
    assert partial and partial.stat().st_size < BIG * 4, "the kill did not land during the write"
    # The next save removes the leftover (its writer is dead: no one holds its lock) and replaces the target.
    from brisk.checkpoints.io import SafeCheckpointIO

    SafeCheckpointIO().save_checkpoint({"w": torch.ones(3)}, target)
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


class Payload:
    """Unpickling this creates a file: proof that code from the checkpoint ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def crafted(tmp_path) -> tuple[Path, Path]:
    marker, ckpt = tmp_path / "payload-ran", tmp_path / "crafted.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"x": Payload(marker)}, "global_step": 0}, ckpt)
    return ckpt, marker


def test_the_payload_is_live(crafted):
    # The control: loading without weights_only does run it, so the tests below can tell.
    ckpt, marker = crafted
    torch.load(ckpt, weights_only=False)
    assert marker.exists()


DATA = [o for o in TINY if o.startswith("data")]


@pytest.mark.parametrize(
    ("module", "args"),
    [("train", [*TINY, "trainer.max_epochs=1", "callbacks.progress_bar=null"]), ("evaluate", [*DATA, "trainer=cpu"])],
)
@pytest.mark.usefixtures("restore_logging")
def test_crafted_checkpoint_is_refused(module, args, crafted, brisk_root, capsys, monkeypatch):
    ckpt, marker = crafted
    proc = brisk_main(module, [*args, f"ckpt_path={ckpt}"], brisk_root, capsys, monkeypatch)
    assert_user_error(proc, str(ckpt), "refused to load", "io.open", "weights_only=True")
    assert not marker.exists(), "the checkpoint's payload ran"


@pytest.mark.usefixtures("restore_logging")
def test_truncated_checkpoint_is_a_clear_error(tmp_path, brisk_root, capsys, monkeypatch):
    ckpt = tmp_path / "last.ckpt"
    torch.save({"w": torch.ones(100_000)}, ckpt)
    ckpt.write_bytes(ckpt.read_bytes()[:50_000])
    proc = brisk_main("evaluate", [*DATA, "trainer=cpu", f"ckpt_path={ckpt}"], brisk_root, capsys, monkeypatch)
    assert_user_error(proc, str(ckpt), "truncated, corrupt")
