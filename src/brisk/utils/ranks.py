"""Which process of a job this is, read from the variables each launcher sets."""

from __future__ import annotations

import os


def first_process() -> bool:
    """The first process of a job, which owns its directory. TorchElastic's ranks (brisk's, torchrun's) get
    RANK and LOCAL_RANK, srun's get SLURM_PROCID, the ranks of other nodes NODE_RANK."""
    return all(os.environ.get(k, "0") == "0" for k in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))
