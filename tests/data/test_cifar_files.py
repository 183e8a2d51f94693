"""brisk's CIFAR reader: round trips, and a clear error naming the file for every kind of bad file."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from brisk.data import cifar_files as cf
from brisk.data import synthetic as syn
from brisk.errors import BriskError


@pytest.fixture
def cifar_root(tmp_path) -> Path:
    return syn.write(tmp_path / "set", n_train=50, n_test=20, seed=3)


def test_round_trip(tmp_path):
    x = torch.randint(0, 256, (7, 3, 32, 32), dtype=torch.uint8)
    y = torch.randint(0, 10, (7,))
    cf.write_batch(tmp_path / "b", x, y, "b")
    x2, y2 = cf.read_batch(tmp_path / "b")
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert x2.dtype == torch.uint8 and y2.dtype == torch.int64


def test_generated_set_reads_as_one_split(cifar_root):
    x, y = cf.read_split(cifar_root, train=True)
    assert x.shape == (50, 3, 32, 32) and x.dtype == torch.uint8 and len(y) == 50
    xt, _ = cf.read_split(cifar_root, train=False)
    assert xt.shape == (20, 3, 32, 32)
    assert cf.read_meta(cifar_root / cf.FOLDER)[0] == "class_0"


def test_generated_files_use_the_official_format(cifar_root):
    with open(cifar_root / cf.FOLDER / "data_batch_1", "rb") as f:
        d = pickle.load(f, encoding="bytes")
    assert set(d) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert d[b"data"].dtype == np.uint8 and d[b"data"].shape == (10, 3072)


def test_synthetic_is_cached_by_its_parameters(tmp_path):
    a = syn.cache_folder(tmp_path, n_train=50, n_test=20, seed=0, noise=0.25)
    b = syn.cache_folder(tmp_path, n_train=50, n_test=20, seed=1, noise=0.25)
    assert a != b
    syn.write(a, n_train=50, n_test=20, seed=0)
    stamp = (a / cf.FOLDER / "data_batch_1").stat().st_mtime_ns
    syn.write(a, n_train=50, n_test=20, seed=0)
    assert (a / cf.FOLDER / "data_batch_1").stat().st_mtime_ns == stamp
    assert not [p for p in a.iterdir() if p.name.startswith(".staging")]


def _batch_file(cifar_root: Path) -> Path:
    return cifar_root / cf.FOLDER / "data_batch_2"


def _write(path: Path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def test_truncated_file(cifar_root):
    path = _batch_file(cifar_root)
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(BriskError, match=str(path)):
        cf.read_split(cifar_root, train=True)


def test_corrupt_file(cifar_root):
    path = _batch_file(cifar_root)
    path.write_bytes(os.urandom(4000))
    with pytest.raises(BriskError, match=f"{path}.*not a readable CIFAR batch"):
        cf.read_split(cifar_root, train=True)


def test_not_a_batch(cifar_root):
    path = _batch_file(cifar_root)
    _write(path, [1, 2, 3])
    with pytest.raises(BriskError, match=f"{path}.*not a CIFAR batch dict"):
        cf.read_batch(path)
    _write(path, {b"something": 1})
    with pytest.raises(BriskError, match=f"{path}.*needs 'data' and 'labels'"):
        cf.read_batch(path)


def test_wrong_shape(cifar_root):
    path = _batch_file(cifar_root)
    _write(path, {b"data": np.zeros((10, 1024), np.uint8), b"labels": [0] * 10})
    with pytest.raises(BriskError, match=f"{path}.*shape \\(10, 1024\\)"):
        cf.read_batch(path)
    _write(path, {b"data": np.zeros((10, 3072), np.float32), b"labels": [0] * 10})
    with pytest.raises(BriskError, match="float32"):
        cf.read_batch(path)
    _write(path, {b"data": np.zeros((10, 3072), np.uint8), b"labels": [0] * 9})
    with pytest.raises(BriskError, match="labels for 10 images"):
        cf.read_batch(path)


def test_label_out_of_range(cifar_root):
    path = _batch_file(cifar_root)
    _write(path, {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 10, 2]})
    with pytest.raises(BriskError, match=f"{path}: label 10 is outside 0..9"):
        cf.read_batch(path)
    _write(path, {b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, -1, 2]})
    with pytest.raises(BriskError, match="label -1"):
        cf.read_batch(path)


def test_missing_meta(cifar_root):
    (cifar_root / cf.FOLDER / cf.META_FILE).unlink()
    with pytest.raises(BriskError, match=f"{cf.META_FILE}: file is missing"):
        cf.read_split(cifar_root, train=True)


def test_missing_folder_is_not_present(tmp_path, cifar_root):
    assert cf.is_present(cifar_root)
    shutil.rmtree(cifar_root / cf.FOLDER)
    assert not cf.is_present(cifar_root)


class _Payload:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_crafted_pickle_does_not_run(cifar_root, tmp_path):
    marker = tmp_path / "pwned"
    path = _batch_file(cifar_root)
    _write(path, {b"data": _Payload(marker), b"labels": [0]})
    with pytest.raises(BriskError, match="refusing to load io.open"):
        cf.read_batch(path)
    assert not marker.exists()
    with open(path, "rb") as f:  # the payload is live: a plain unpickler runs it
        pickle.load(f)
    assert marker.exists()
