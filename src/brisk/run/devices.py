"""How many devices and processes a job has on this node, read from the config its Trainer is built from, before
any Trainer is: the batch split over ranks (brisk.run.checks) and the ranks brisk starts (brisk.run.elastic)
count them the same way."""

from __future__ import annotations

import os

import torch
from lightning.fabric.plugins.environments import (
    LSFEnvironment,
    MPIEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)
from lightning.pytorch.strategies import StrategyRegistry
from omegaconf import DictConfig, ListConfig

from brisk.errors import BriskError

DEVICES = "trainer.devices"


def accelerator(trainer: DictConfig) -> str:
    accelerator = str(trainer.accelerator)
    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if accelerator == "gpu" else accelerator


def _requested(devices, available: int, accelerator: str) -> int:
    """How many devices `trainer.devices` asks for, in the forms Lightning accepts; checked against `available`."""
    if isinstance(devices, str) and devices.strip() == "auto":
        return available if accelerator == "cuda" else 1
    if isinstance(devices, str) and "," in devices:
        devices = [int(d) for d in devices.split(",") if d.strip()]
    if isinstance(devices, (list, tuple, ListConfig)):
        if accelerator == "cpu":
            raise BriskError(f"trainer.devices={list(devices)}: on CPU give a number of processes, e.g. 2.", DEVICES)
        ids = [int(d) for d in devices]
        if any(i < 0 or i >= available for i in ids):
            raise BriskError(
                f"trainer.devices={list(ids)}: this machine has {available} {accelerator} device(s), "
                f"numbered 0..{available - 1}.",
                DEVICES,
            )
        return len(ids)
    try:
        n = int(devices)
    except (TypeError, ValueError):
        raise BriskError(f"trainer.devices={devices} is not a number, a list of ids, or auto.", DEVICES) from None
    if n == -1 and accelerator == "cuda":
        return available
    if n < 1:
        raise BriskError(f"trainer.devices={devices} must be >= 1 (or auto).", DEVICES)
    if n > available:
        unit = "CUDA GPUs" if accelerator == "cuda" else "CPU cores"
        raise BriskError(
            f"trainer.devices={n} but this machine has {available} {unit}. Use trainer.devices={available} or fewer.",
            DEVICES,
        )
    return n


def device_count(trainer: DictConfig) -> int:
    """Devices per node; 1 for accelerators brisk does not count (Lightning checks those itself)."""
    kind = accelerator(trainer)
    if kind == "cuda":
        return _requested(trainer.devices, torch.cuda.device_count(), kind)
    if kind == "cpu":
        # more processes than cores only time-slice the same cores
        return _requested(trainer.devices, len(os.sched_getaffinity(0)), kind)
    return 1


def num_nodes(trainer: DictConfig) -> int:
    nodes = trainer.get("num_nodes", 1)
    if not isinstance(nodes, int) or nodes < 1:
        raise BriskError(f"trainer.num_nodes={nodes} must be a whole number >= 1.", "trainer.num_nodes")
    return nodes


# Where a launcher outside made this node's processes, as Lightning detects it (and LOCAL_RANK, set by any launcher
# that starts processes for Lightning, TorchElastic's agent for brisk's ranks included).
OUTSIDE = (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)  # those Lightning 2.6.6 detects
FORKED = ("spawn", "fork", "forkserver")  # start methods of strategies whose processes Lightning makes itself


def script_processes(trainer: DictConfig) -> int:
    """How many processes Lightning would start on this node by running the script again (1: none), read from the
    config the Trainer is built from: more than one device under a strategy whose start method is popen (ddp, auto,
    fsdp, deepspeed; not ddp_spawn or ddp_fork, whose processes Lightning spawns or forks itself), where no launcher
    outside made them. Lightning 2.6.6 gives the same answer for each strategy name and device count
    (tests/run/test_launchers.py), and no public attribute of a built Trainer says it."""
    strategy = trainer.get("strategy", "auto")
    if not isinstance(strategy, str) or "LOCAL_RANK" in os.environ or any(env.detect() for env in OUTSIDE):
        return 1
    if strategy in StrategyRegistry and StrategyRegistry[strategy]["init_params"].get("start_method") in FORKED:
        return 1
    return device_count(trainer)


def ranks_to_start(cfg: DictConfig) -> int:
    """The processes this job starts on this node (brisk.run.elastic): its devices where Lightning would start the
    other ranks by running the script again, 1 where a launcher made them (torchrun, srun)."""
    n = script_processes(cfg.trainer)
    if n > 1 and num_nodes(cfg.trainer) > 1:
        raise BriskError(
            f"trainer.num_nodes={cfg.trainer.num_nodes}: brisk starts the ranks of one node. Start each node's ranks "
            "with torchrun or srun (docs/distributed.md: Multi-node).",
            "trainer.num_nodes",
        )
    return n
