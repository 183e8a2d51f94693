"""`data.resident`: a split copied to the training device once, when it fits there.

A resident split is one compact uint8 tensor on the device (the split's rows only, so an image-folder cache
that is memory-mapped is read once) and its labels beside it. TensorBatchLoader then cuts every batch there:
no host-to-device copy per batch, and Lightning's transfer of an already-placed batch does nothing.
It must leave the training its room: a split is placed only when it takes at most half the memory the device
has free (CUDA's free memory, or the host's MemAvailable on a CPU); otherwise one line says so and the split
stays on the host, read as without `resident`. A split that is placed is said in one line too: where and how large.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

log = logging.getLogger("brisk")

SHARE = 0.5  # of the free memory a split may take


def free_bytes(device: torch.device) -> int | None:
    """Free memory of `device`, or None where it cannot be read (then the split is placed)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def place(
    name: str, images: torch.Tensor, rows: torch.Tensor, labels: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, None, torch.Tensor] | None:
    """(images, None, labels) of the split on `device`, or None when it does not fit there (said in one line)."""
    need = len(rows) * images[0].numel() * images.element_size()
    free = free_bytes(device)
    if free is not None and need > SHARE * free:
        log.warning(
            f"data.resident: the {name} split ({need / 2**20:.0f} MiB) does not fit in half the free memory of "
            f"{device} ({free / 2**20:.0f} MiB): it stays on the host and its batches are copied as usual."
        )
        return None
    placed = images.index_select(0, rows).to(device), None, labels.to(device)
    # Said once a split (base.py keeps what is placed): otherwise `data.resident=true` gives no sign it took effect.
    log.info(f"data.resident: the {name} split ({len(rows)} images, {need / 2**20:.1f} MiB) is on {device}")
    return placed
