"""The optimizers and the schedules brisk adds to torch's (conf/optimizer/, conf/scheduler/ name them)."""

from brisk.optim.muon import MuonWithAdamW
from brisk.optim.per_examples import PerExamplesSGD
from brisk.optim.schedules import cosine_with_warmup, exp_decay, warmup_linear

__all__ = ["MuonWithAdamW", "PerExamplesSGD", "cosine_with_warmup", "exp_decay", "warmup_linear"]
