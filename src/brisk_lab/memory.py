"""Peak memory between reset() and read(): CUDA max allocated on a GPU, peak RSS on a CPU.

On Linux the kernel's RSS high-water mark (VmHWM) can be reset by writing 5 to /proc/self/clear_refs,
so each measured fit gets its own exact peak in the same process. Before the reset, freed memory is
handed back to the OS (gc, then glibc's malloc_trim), so the starting level is what is really live;
`added_mb` is the peak over that level: what the fit itself needed (weights, optimizer, activations).
Without clear_refs the peak is the process lifetime's, exact only for the largest fit of a process.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import resource
import sys
from pathlib import Path

import torch


def _rss_field(name: str) -> float | None:
    """A field of /proc/self/status in MB (VmRSS: now, VmHWM: the high-water mark)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) / 1024  # kB
    return None


def _release_freed_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakMemory:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.kind = "CUDA max allocated" if device.type == "cuda" else "peak RSS"
        self.start_mb = 0.0

    def _now_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device) / 2**20
        return _rss_field("VmRSS") or 0.0

    def reset(self) -> None:
        _release_freed_memory()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            try:
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                self.kind = "peak RSS (process lifetime)"
        self.start_mb = self._now_mb()

    def read(self) -> dict[str, float]:
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            peak = _rss_field("VmHWM")
            if peak is None:
                ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                peak = ru / 2**20 if sys.platform == "darwin" else ru / 1024  # bytes on macOS, kB on Linux
        return {"peak_mb": peak, "added_mb": max(0.0, peak - self.start_mb)}
