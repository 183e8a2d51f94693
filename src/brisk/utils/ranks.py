"""Which process of a job this is, read from the variables each launcher sets; and, in a rank that brisk's own
launch started (brisk.run.elastic), its tie to the job."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys

ENV = "BRISK_ELASTIC"  # in a rank's environment: the job's process id, its parent
READY = "BRISK_ELASTIC_READY"  # in a rank's environment: the file rank 0 creates once brisk's code takes Ctrl-C


def first_process() -> bool:
    """The first process of a job, which owns its directory. TorchElastic's ranks (brisk's, torchrun's) get
    RANK and LOCAL_RANK, srun's get SLURM_PROCID, the ranks of other nodes NODE_RANK."""
    return all(os.environ.get(k, "0") == "0" for k in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


def guard() -> None:
    """In a rank of brisk's launch: die with the job. A rank whose job already died gets no signal: it ends here."""
    if (job := os.environ.get(ENV)) is None:
        return
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG: dies with the job
    if os.getppid() != int(job):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("LOCAL_RANK") == "0" and (ready := os.environ.get(READY)):
        open(ready, "a").close()  # from here on a SIGINT ends this rank with brisk's one line (brisk.cli)


def leave_process_group() -> None:
    """Destroy this process's torch.distributed group, if it has one, while Python still runs. Left to the end of the
    interpreter, gloo's worker threads may still hold tensors whose release then aborts the rank with SIGABRT
    ("terminate called without an active exception"; pytorch PR #179291 traces it). Seen in a DDP sweep job's rank
    1 after its test had finished, twice in fresh-clone runs: the job failed with "rank 1 failed with exit code -6"."""
    dist = sys.modules.get("torch.distributed")  # never imported here: a run that loaded no torch has no group
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        # The group lives on in what still holds it, such as Lightning's DistributedDataParallel wrapper, in reference
        # cycles with the Trainer that only the collector frees: freed now, its threads end while Python still runs.
        # Seen again at 9af3852 with the destroy alone; that the collection ends it is not yet shown.
        gc.collect()
