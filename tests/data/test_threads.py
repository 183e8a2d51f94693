"""brisk.utils.threads.small_ops: one intra-op thread for the block on a CPU, the count as it was after.

No timings here: why one thread (torch's spin-waiting OpenMP threads on busy cores) is measured in the lab's
loaded pipeline rows and in docs/data.md#loaded-machines.
"""

from __future__ import annotations

import pytest
import torch

from brisk.utils.threads import small_ops


@pytest.fixture
def two_threads():
    """torch at 2 intra-op threads for the test (whatever the machine's default), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


@pytest.mark.parametrize("device", [torch.device("cpu"), "cpu", torch.device("cpu", 0)])
def test_one_thread_inside_on_a_cpu_and_the_count_restored_after(two_threads, device):
    with small_ops(device):
        assert torch.get_num_threads() == 1
        assert torch.ones(4).add(1).sum().item() == 8  # ops run as usual inside
    assert torch.get_num_threads() == two_threads


def test_the_count_is_restored_when_the_block_raises(two_threads):
    with pytest.raises(RuntimeError, match="in the block"), small_ops(torch.device("cpu")):
        assert torch.get_num_threads() == 1
        raise RuntimeError("in the block")
    assert torch.get_num_threads() == two_threads


def test_nested_blocks_restore_the_outer_count(two_threads):
    with small_ops(torch.device("cpu")):
        with small_ops(torch.device("cpu")):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == two_threads


def test_another_device_leaves_the_count_untouched(two_threads):
    with small_ops(torch.device("meta")):  # a stand-in for cuda, which the CPU machines lack
        assert torch.get_num_threads() == two_threads
        torch.set_num_threads(3)  # and what the block does to it stays: small_ops saved nothing to restore
    assert torch.get_num_threads() == 3
