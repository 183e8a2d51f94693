"""`small_ops(device)`: torch's small per-batch ops on the CPU run on one intra-op thread.

torch runs an op over several OpenMP threads (2 on the 2-core VM), and those threads spin-wait for each other.
On idle cores that pays a little on large ops; on oversubscribed cores, where another process holds the core a
thread waits for, a millisecond op takes tens. brisk's crop and flip of a batch of 512 uint8 images
(scripts/thread_cost.py, 2-core VM, torch 2.14.1): 0.66 ms on 2 threads and 0.84 ms on one when quiet; 27 ms
against 2.8 ms beside 4 busy-loop processes. In the lab's loaded pipeline rows brisk delivered 102k images/s with
its gather and batch ops on one thread against 51k on two, the classic loader 3.4k. So the loader and
on_after_batch_transfer run those ops inside `small_ops`; the count is back for the training step, which loses
1 to 2% at most on quiet cores (docs/data.md#loaded-machines). On a GPU the ops run on the device and the host's
thread count does not matter: nothing is changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def small_ops(device: torch.device | str) -> Iterator[None]:
    """On a CPU `device`, one intra-op thread for the block, and the previous count again after (also on an
    exception); on any other device, nothing."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
