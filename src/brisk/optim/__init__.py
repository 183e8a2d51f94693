"""The optimizer and the schedules brisk adds to torch's (conf/optimizer/, conf/scheduler/ name them)."""

from brisk.optim.muon import MuonWithAdamW
from brisk.optim.schedules import cosine_with_warmup, exp_decay

__all__ = ["MuonWithAdamW", "cosine_with_warmup", "exp_decay"]
