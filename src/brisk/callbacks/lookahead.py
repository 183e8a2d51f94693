"""Lookahead: every few steps the weights are pulled back toward a slow copy of themselves, as airbench94 trains.

Every `every` optimizer steps the slow copy moves toward the net, slow = lerp(slow, net, 1 - d), and the net is
set to it; d = decay x (step / total)^power grows from 0 (the slow copy follows the net) to `decay` at the end
(0.95^5, airbench94's). After the last step the net is the slow copy. Every floating tensor of the net's state
takes part, BatchNorm's running statistics included, as in airbench (KellerJordan/cifar10-airbench).

Unlike callbacks=ema (Lightning's EMAWeightAveraging, which evaluates an average and trains on), this writes back:
training continues from the averaged weights. The slow copy is in every checkpoint, so a resume is exact.
"""

from __future__ import annotations

import lightning as L
import torch

from brisk.errors import check
from brisk.registry import CALLBACKS


@CALLBACKS.register("lookahead")
class Lookahead(L.Callback):
    def __init__(self, every: int = 5, decay: float = 0.95**5, power: float = 3.0) -> None:
        # Here, not at the first update: a zero `every` divided by zero there, a NaN decay turned the net to NaN
        # only after training had begun.
        check("callbacks.lookahead.every", every, lambda v: v >= 1, "a whole number >= 1 (optimizer steps)", int)
        check("callbacks.lookahead.decay", decay, lambda v: 0 <= v <= 1, "a number in [0, 1]")
        check("callbacks.lookahead.power", power, lambda v: v >= 0, "a number >= 0")
        self.every, self.decay, self.power = every, decay, power
        self.slow: list[torch.Tensor] | None = None
        self._fast: list[torch.Tensor] = []
        self._done = -1  # the global step of the last update
        self._total = 0  # the fit's optimizer steps, read once: Lightning recomputes the estimate on every call

    def on_train_start(self, trainer, pl_module) -> None:
        # After a resume's restore; the net on its device.
        self.attach(pl_module.net, trainer.estimated_stepping_batches)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.update(trainer.global_step)

    def attach(self, net: torch.nn.Module, total: int) -> None:
        """Follow `net` (its own tensors: state_dict shares their storage) over a fit of `total` optimizer steps.
        The hooks call this and `update`; a loop other than Lightning's (the lab's plain loop) calls them itself."""
        self._fast = [t for t in net.state_dict().values() if t.is_floating_point()]
        self._total = total
        if self.slow is None:
            self.slow = [t.detach().clone() for t in self._fast]
        else:
            self.slow = [s.to(device=t.device, dtype=t.dtype) for s, t in zip(self.slow, self._fast, strict=True)]

    def update(self, step: int) -> None:
        """After the optimizer step that made the count of steps `step`."""
        total = self._total
        if step == self._done or (step % self.every and step < total):  # accumulation: one update per step
            return
        self._done = step
        with torch.no_grad():
            if step < total:
                torch._foreach_lerp_(self.slow, self._fast, 1 - self.decay * (step / total) ** self.power)
            torch._foreach_copy_(self._fast, self.slow)

    def state_dict(self) -> dict:
        return {"slow": self.slow, "done": self._done}

    def load_state_dict(self, state_dict: dict) -> None:
        self.slow, self._done = state_dict["slow"], int(state_dict["done"])
