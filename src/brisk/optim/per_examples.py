"""SGD whose learning rate and weight decay are given per 1024 examples, so a recipe keeps when the batch changes.

airbench94 (KellerJordan/cifar10-airbench) states its hyperparameters this way: lr 11.5 and weight decay 0.0153,
"per 1024 examples", at Nesterov momentum 0.85. With momentum m an update keeps acting for about 1 / (1 - m) steps,
so the examples one lr "covers" are K = 1024 (1 + 1 / (1 - m)) (7850 at 0.85). For B examples per optimizer step:

    lr per step     = lr x B / K                 (1.50 at B = 1024; the loss is the batch mean, as in brisk)
    decay per step  = weight_decay x B / K       (0.0020), i.e. torch's weight_decay = that / (the group's lr)

Both follow the schedule, as in airbench. ImageClassifier fills `examples_per_step` (the global batch times the
accumulation); model.weight_decay is the per-1024 decay of the weights' group, and biases and norms get none.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch.optim import SGD

from brisk.errors import BriskError
from brisk.registry import OPTIMIZERS


@OPTIMIZERS.register("sgd_per_1024")
class PerExamplesSGD(SGD):
    def __init__(
        self,
        params: Iterable,
        lr: float,
        examples_per_step: int,
        momentum: float = 0.85,
        nesterov: bool = True,
        per: int = 1024,
    ) -> None:
        if examples_per_step < 1 or not 0 <= momentum < 1:
            raise BriskError(
                f"optimizer: examples_per_step={examples_per_step} and momentum={momentum} must be >= 1 and in [0, 1)."
            )
        kilo = per * (1 + 1 / (1 - momentum))
        # A group's lr_mult (brisk.models.param_groups) scales its lr after this; OneCycle's max_lr scales by
        # lr_scale (brisk.optim.schedules.build).
        self.lr_scale = examples_per_step / kilo
        step_lr = lr * self.lr_scale
        super().__init__(params, lr=step_lr, momentum=momentum, nesterov=nesterov)
        for group in self.param_groups:  # decay per step = weight_decay x B / K, whatever the group's lr
            group["weight_decay"] *= self.lr_scale / (step_lr * group.get("lr_mult", 1.0))
