"""Shared test helpers: tiny configs composed through the real Hydra configs, CLI runs as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from brisk.cli import CONFIG_PATH, quote_group_options

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


@pytest.fixture(scope="session")
def brisk_root(tmp_path_factory) -> Path:
    """One project root for the session, so generated data is made once and cached."""
    return tmp_path_factory.mktemp("brisk_root")


@pytest.fixture(scope="session")
def tiny_trained(brisk_root):
    """One TINY run of 4 epochs (~0.5 test accuracy; chance is 0.1), shared by the modules that only read it."""
    proc = run_cli("train", [*TINY, "trainer.max_epochs=4"], brisk_root, timeout=600)
    return run_dir_of(proc), proc


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


@pytest.fixture
def project(tmp_path, brisk_root) -> Path:
    """A fresh project root that shares the session's generated data; nothing may be left running in it."""
    (brisk_root / "data").mkdir(exist_ok=True)
    (tmp_path / "data").symlink_to(brisk_root / "data", target_is_directory=True)
    yield tmp_path
    assert processes_of(tmp_path) == [], "processes left running after the test"


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
    import logging

    from hydra.core.global_hydra import GlobalHydra

    saved_argv, saved_handlers = sys.argv, logging.getLogger().handlers[:]
    sys.argv = [f"brisk-{module}", f"paths.root_dir={root}", *overrides]
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
        for handler in logging.getLogger().handlers[:]:  # Hydra's file handler would take other tests' logs
            if handler not in saved_handlers:
                logging.getLogger().removeHandler(handler)
                handler.close()


# A finished 1-epoch run on a generated set other than the default one (seed 3).
FINISHED = [*TINY, "data.synthetic.seed=3", "trainer.max_epochs=1", "callbacks.progress_bar=null"]


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
