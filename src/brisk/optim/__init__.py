"""The optimizers and the schedules conf/optimizer/ and conf/scheduler/ pick by name: torch's, registered here, and
those brisk adds, registered where they are defined."""

import torch
from torch.optim import lr_scheduler

from brisk.optim.muon import MuonWithAdamW
from brisk.optim.per_examples import PerExamplesSGD
from brisk.optim.schedules import cosine_with_warmup, exp_decay, warmup_linear
from brisk.registry import OPTIMIZERS, SCHEDULES

OPTIMIZERS.register("sgd", torch.optim.SGD)
OPTIMIZERS.register("adam", torch.optim.Adam)
OPTIMIZERS.register("adamw", torch.optim.AdamW)
SCHEDULES.register("onecycle", lr_scheduler.OneCycleLR)
SCHEDULES.register("step", lr_scheduler.StepLR)

__all__ = ["MuonWithAdamW", "PerExamplesSGD", "cosine_with_warmup", "exp_decay", "warmup_linear"]
