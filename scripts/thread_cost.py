"""Why brisk runs its per-batch CPU ops on one thread (docs/data.md#loaded-machines), measured by hand:

    .venv/bin/python scripts/thread_cost.py            # the crop at 2 and 1 threads, quiet, then with 4 busy loops
    .venv/bin/python scripts/thread_cost.py step       # crop + training step, with and without small_ops

The crop: brisk.data.augment.random_crop(x, 4, flip=True) on a 512 x 3 x 32 x 32 batch, ms per call, median of
10 interleaved rounds of 20 calls. The step: the crop, then a training step of brisk's SimpleCNN (width 8, batch 128;
width 32, batch 512) with SGD, the crop on torch's threads or inside small_ops (one thread, then the count
back for the step); ms per step, median of 16 interleaved rounds of 20 steps.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

from brisk.data.augment import random_crop
from brisk.models.nets import SimpleCNN
from brisk.utils.threads import small_ops
from brisk_lab.pipeline import busy_cores


def interleaved(sides: dict, rounds: int, calls: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(rounds):
        for name in list(sides)[:: 1 if r % 2 == 0 else -1]:
            start = time.perf_counter()
            for _ in range(calls):
                sides[name]()
            times[name].append((time.perf_counter() - start) / calls * 1000)
    return {k: statistics.median(v) for k, v in times.items()}


def crop() -> None:
    threads = torch.get_num_threads()

    def at(n: int, x: torch.Tensor):
        def call():
            torch.set_num_threads(n)
            random_crop(x, 4, flip=True)
            torch.set_num_threads(threads)

        return call

    for busy in (0, 4):
        with busy_cores(busy):
            for dtype in (torch.uint8, torch.float32):
                x = torch.randint(0, 256, (512, 3, 32, 32), dtype=torch.uint8).to(dtype)
                ms = interleaved({f"{threads} threads": at(threads, x), "1 thread": at(1, x)}, 10, 20)
                print(f"busy loops {busy}, {dtype}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()))


def step_sides(width: int, batch: int) -> dict:
    """The crop, then a training step, with the crop on torch's threads or inside small_ops."""
    torch.manual_seed(0)
    net = SimpleCNN(num_classes=10, width=width)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    u = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8)

    def one():
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def default_threads():
        random_crop(u, 4, flip=True)
        one()

    def toggled():
        with small_ops("cpu"):  # as on_after_batch_transfer runs it
            random_crop(u, 4, flip=True)
        one()

    for _ in range(3):
        one()
    return {"all threads": default_threads, "crop in small_ops": toggled}


def step() -> None:
    for width, batch in ((8, 128), (32, 512)):
        ms = interleaved(step_sides(width, batch), 16, 20)
        print(f"width {width}, batch {batch}: " + ", ".join(f"{k} {v:.1f} ms/step" for k, v in ms.items()))


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    step() if sys.argv[1:] == ["step"] else crop()
