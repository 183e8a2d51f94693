"""Bad data, end to end: brisk-train stops with exit 2 and one `brisk: error:` line naming the file and
the fix, prints no traceback, and writes nothing over the data it was given."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from brisk.data import cifar_files as cf
from brisk.data import synthetic as syn
from helpers import TINY, assert_user_error, brisk_train, tree

FOLDER = cf.FOLDER
TRAIN = [o for o in TINY if not o.startswith("data")] + ["trainer.max_epochs=1", "callbacks.progress_bar=null"]


def data_args(root: Path) -> list[str]:
    return [*TRAIN, "data=cifar10", f"data.root={root}", "data.val_size=10", "data.batch_size=10"]


@pytest.fixture(scope="module")
def good_set(tmp_path_factory) -> Path:
    return syn.write(tmp_path_factory.mktemp("good") / "set", n_train=50, n_test=20, seed=3)


@pytest.fixture
def data_root(good_set, tmp_path) -> Path:
    """A private copy of a valid set, to damage."""
    root = tmp_path / "data"
    shutil.copytree(good_set, root)
    return root


def _dump(path: Path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:5000])


DAMAGE = {
    "truncated": (_truncate, "not a readable CIFAR batch"),
    "corrupt": (lambda p: p.write_bytes(os.urandom(4000)), "not a readable CIFAR batch"),
    "not_a_batch": (lambda p: _dump(p, {b"weights": [1, 2, 3]}), "a CIFAR batch needs 'data' and 'labels'"),
    "wrong_shape": (
        lambda p: _dump(p, {b"data": np.zeros((10, 1024), np.uint8), b"labels": [0] * 10}),
        "shape (10, 1024), expected uint8 N x 3072",
    ),
    "label_out_of_range": (
        lambda p: _dump(p, {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 10, 2]}),
        "label 10 is outside 0..9",
    ),
    "missing_meta": (None, "missing"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_damaged_set_stops_with_one_line(case, data_root, brisk_root, capsys, monkeypatch):
    damage, message = DAMAGE[case]
    folder = data_root / FOLDER
    bad = folder / (cf.META_FILE if damage is None else "data_batch_2")
    if damage is None:
        bad.unlink()
    else:
        damage(bad)
    before = tree(data_root)
    proc = brisk_train(data_args(data_root), brisk_root, capsys, monkeypatch)  # in this process: exit 2 and stderr
    line = assert_user_error(proc, str(bad), message)
    # the fix: what to do about the file, in words
    assert "download" in line and ("Delete" in line or "delete" in line)
    assert tree(data_root) == before, "brisk wrote into the data folder"


def test_data_dir_not_writable(tmp_path, brisk_root, capsys, monkeypatch):
    # Root ignores permissions, so the data folder is made impossible instead: a path under a regular file.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    root = blocker / "data"
    proc = brisk_train(data_args(root), brisk_root, capsys, monkeypatch)  # in this process: exit 2 and stderr
    assert_user_error(proc, f"cannot write to data directory {root}", "Set data.root to a writable folder")
    synthetic = [*TRAIN, *[o for o in TINY if o.startswith("data")], f"paths.data_dir={root}"]
    assert_user_error(brisk_train(synthetic, brisk_root, capsys, monkeypatch), "cannot write to data directory")
    assert blocker.read_text() == "not a folder"


class _Archive(BaseHTTPRequestHandler):
    """Serves the archive with its full length announced, then hangs up halfway: an interrupted download."""

    body = b""
    gets = 0

    def _headers(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()

    def do_HEAD(self) -> None:
        self._headers()

    def do_GET(self) -> None:
        type(self).gets += 1
        self._headers()
        self.wfile.write(self.body[: len(self.body) // 2])
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args) -> None:
        pass


# Two runs in processes of their own (~18 s); damaged archives and sets stay in the default suite.
@pytest.mark.slow
def test_interrupted_download_leaves_nothing(good_set, tmp_path, brisk_root):
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(good_set / FOLDER, arcname=FOLDER)
    _Archive.body = archive.read_bytes() * 4  # large enough to arrive in more than one piece
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Archive)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    root = tmp_path / "data"
    url = f"http://127.0.0.1:{server.server_port}/cifar-10-python.tar.gz"
    # brisk has no URL option: the child process points brisk's reader at the local server before it starts.
    code = (
        "import runpy, sys; import brisk.data.cifar_files as cf; cf.URL = sys.argv.pop(1); "
        "runpy.run_module('brisk.train', run_name='__main__', alter_sys=True)"
    )
    try:
        for _ in range(2):  # a second run must not trust anything the first one left
            gets = _Archive.gets
            proc = subprocess.run(
                [sys.executable, "-c", code, url, *data_args(root)],
                cwd=brisk_root,
                env={**os.environ, "BRISK_ROOT": str(brisk_root)},
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert_user_error(proc, f"could not download CIFAR-10 into {root}", url, "data=synthetic")
            assert _Archive.gets > gets, "the download never reached the local server"
            assert list(root.iterdir()) == [], "a partial download was left behind"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
