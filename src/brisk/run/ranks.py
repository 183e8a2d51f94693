"""Which process of a DDP job this is, and how many this job starts: what every run asks, whether or not it
starts ranks. Starting them is brisk.run.elastic's, imported only by a run that does."""

from __future__ import annotations

import ctypes
import os
import signal

from omegaconf import DictConfig

from brisk.errors import BriskError
from brisk.run import devices

ENV = "BRISK_ELASTIC"  # in a rank's environment: the job's process id, its parent
READY = "BRISK_ELASTIC_READY"  # in a rank's environment: the file rank 0 creates once brisk's code takes Ctrl-C


def needed(cfg: DictConfig) -> int:
    """The processes this job starts on this node: its devices where Lightning would start the other ranks by
    running the script again (ddp, fsdp, deepspeed; not ddp_spawn or fork), 1 where a launcher made them (torchrun,
    srun)."""
    n = devices.script_processes(cfg.trainer)
    if n > 1 and devices.num_nodes(cfg.trainer) > 1:
        raise BriskError(
            f"trainer.num_nodes={cfg.trainer.num_nodes}: brisk starts the ranks of one node. Start each node's ranks "
            "with torchrun or srun (docs/distributed.md: Multi-node).",
            "trainer.num_nodes",
        )
    return n


def guard() -> None:
    """In a rank of this launch: die with the job. A rank whose job already died gets no signal: it ends here."""
    if (job := os.environ.get(ENV)) is None:
        return
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG: dies with the job
    if os.getppid() != int(job):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("LOCAL_RANK") == "0" and (ready := os.environ.get(READY)):
        open(ready, "a").close()  # from here on a SIGINT ends this rank with brisk's one line (brisk.cli)
