"""The fixtures the tests share: project roots, a trained run, logging and rank put back. Helpers are in
helpers.py."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from helpers import EXACT_DDP, FINISHED, TINY, main_in_process, main_printing, processes_of, run_cli, run_dir_of

if os.environ.get("PYTEST_XDIST_WORKER"):
    # make test's two workers on two cores: one torch thread each, and in the processes they start. Two threads
    # each spin-wait on cores the other worker holds (brisk.utils.threads): test_speedrun.py took 53 s so, 33 s on one.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def brisk_root(tmp_path_factory) -> Path:
    """One project root for the session, so generated data is made once and cached."""
    return tmp_path_factory.mktemp("brisk_root")


@pytest.fixture(scope="session")
def tiny_trained(brisk_root):
    """One TINY run of 4 epochs (~0.5 test accuracy; chance is 0.1), shared by the modules that only read it:
    (run directory, what brisk-train printed). In this process: nothing read here needs one of its own, and a start
    costs ~7 s of importing on 2 cores."""
    proc = main_printing("train", [*TINY, "trainer.max_epochs=4"], brisk_root)
    return run_dir_of(proc), proc


@pytest.fixture
def project(tmp_path, brisk_root) -> Path:
    """A fresh project root that shares the session's generated data; nothing may be left running in it."""
    (brisk_root / "data").mkdir(exist_ok=True)
    (tmp_path / "data").symlink_to(brisk_root / "data", target_is_directory=True)
    yield tmp_path
    assert processes_of(tmp_path) == [], "processes left running after the test"


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory, brisk_root):
    """One brisk-train of EXACT_DDP in a project root of its own: (run directory, process, root). A 2-rank job starts
    three processes (~25 s on 2 cores), so the tests that only read one share it: test_distributed.py (the directory,
    the console, the global metrics) and test_equivalence.py (its weights are one process's)."""
    root = tmp_path_factory.mktemp("ddp_run")
    (brisk_root / "data").mkdir(exist_ok=True)
    (root / "data").symlink_to(brisk_root / "data", target_is_directory=True)
    proc = run_cli("train", EXACT_DDP, root)
    assert processes_of(root) == [], "processes left running after the run"
    return run_dir_of(proc), proc, root


@pytest.fixture(scope="session")
def finished_run(brisk_root) -> Path:
    run_dir = brisk_root / "finished-run"
    assert main_in_process("train", [*FINISHED, f"hydra.run.dir={run_dir}"], brisk_root) == 0
    return run_dir


@pytest.fixture(autouse=True)
def rank_zero_again():
    """Each test starts as rank 0: an in-process DDP or SLURM test leaves Lightning's global rank behind,
    which silences rank_zero_warn/rank_zero_info in the tests after it."""
    from lightning.pytorch.utilities import rank_zero_only

    rank_zero_only.rank = 0
    yield


@pytest.fixture
def restore_logging():
    """Each in-process run configures logging as Hydra does; give the next test the handlers it had."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for h in root.handlers[:]:
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.handlers[:] = handlers
    root.setLevel(level)
