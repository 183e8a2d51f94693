"""The optimizers and the schedules conf/optimizer/ and conf/scheduler/ pick by name: torch's, registered here, and
those brisk adds, registered where they are defined (imported on first use, brisk.utils.lazy)."""

import torch
from torch.optim import lr_scheduler

from brisk.registry import OPTIMIZERS, SCHEDULES
from brisk.utils.lazy import exports

OPTIMIZERS.register("sgd", torch.optim.SGD)
OPTIMIZERS.register("adam", torch.optim.Adam)
OPTIMIZERS.register("adamw", torch.optim.AdamW)
SCHEDULES.register("onecycle", lr_scheduler.OneCycleLR)
SCHEDULES.register("step", lr_scheduler.StepLR)

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "MuonWithAdamW": ".muon",
        "PerExamplesSGD": ".per_examples",
        "cosine_with_warmup": ".schedules",
        "exp_decay": ".schedules",
        "warmup_linear": ".schedules",
    },
)
