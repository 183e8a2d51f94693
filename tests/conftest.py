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


@pytest.fixture(scope="session")
def brisk_root(tmp_path_factory) -> Path:
    """One project root for the session, so generated data is made once and cached."""
    return tmp_path_factory.mktemp("brisk_root")


def compose_cfg(overrides: list[str], root: Path, config_name: str = "train"):
    """The config brisk-train would see, with the hydra-runtime paths pinned to `root`."""
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=quote_group_options([f"paths.root_dir={root}", *overrides]))
    with open_dict(cfg):
        cfg.paths.output_dir = str(root / "out")
    return cfg


def run_cli(module: str, overrides: list[str], root: Path, timeout: float = 240, check: bool = True, **kw):
    """Run `python -m brisk.<module> overrides...` with the project root at `root`."""
    env = {**os.environ, "BRISK_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", f"brisk.{module}", *overrides],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"brisk.{module} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def run_dir_of(proc) -> Path:
    """The run directory: the last line brisk prints."""
    return Path(proc.stdout.strip().splitlines()[-1])


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())
