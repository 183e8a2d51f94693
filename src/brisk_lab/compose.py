"""Configs for the lab's runs: the bench's own config with a few more overrides, composed as the CLI would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hydra import compose
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig

from brisk import BriskError, quote_group_options, write_text


def task_overrides() -> list[str]:
    """What the user typed after brisk-bench: every run of the lab starts from it."""
    return list(HydraConfig.get().overrides.task)


def compose_with(extra: list[str], where: str) -> DictConfig:
    """The config of `brisk-bench <the user's overrides> <extra>`: the later of two values for a key wins.

    `where` names the bench key that asked for `extra`, for the error message if it does not compose.
    """
    try:
        return compose(
            config_name=HydraConfig.get().job.config_name, overrides=[*task_overrides(), *quote_group_options(extra)]
        )
    except HydraException as e:
        reason = str(e).split("\nConfig search path")[0].strip()  # the search path is noise here
        raise BriskError(f"{where}: `{' '.join(extra)}` does not compose: {reason}") from None


def run_child(extra: list[str], run_dir: Path, warmup: int, steps: int, timeout_s: float) -> dict:
    """A measured fit in a fresh `brisk-bench` process (bench.run=[fit]) and its result.

    For what cannot share a process with the lab: several DDP ranks, whose launcher re-runs this
    same command in each rank, so every rank composes the same config.
    """
    command = [
        sys.executable,
        "-m",
        "brisk_lab.bench",
        *task_overrides(),
        *quote_group_options(extra),
        "bench.run=[fit]",
        f"bench.fit.warmup={warmup}",
        f"bench.fit.steps={steps}",
        f'hydra.run.dir="{run_dir}"',
    ]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=os.getcwd())
    except subprocess.TimeoutExpired:
        raise BriskError(f"bench: `{' '.join(extra)}` ran past bench.timeout_s={timeout_s}; see {run_dir}.") from None
    result = run_dir / "bench.json"
    if proc.returncode != 0 or not result.is_file():
        log_file = run_dir / "child.log"  # the child's whole output: the error stays one line
        write_text(log_file, proc.stdout + proc.stderr)
        last = next((line for line in reversed((proc.stdout + proc.stderr).splitlines()) if line.strip()), "")
        raise BriskError(
            f"bench: the run `{' '.join(extra)}` failed (exit {proc.returncode}): {last.strip()[:300]} "
            f"(its output: {log_file})."
        )
    return json.loads(result.read_text())["parts"]["fit"]
