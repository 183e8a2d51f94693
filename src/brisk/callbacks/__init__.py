from brisk.callbacks.checkpoint import LastCheckpoint
from brisk.callbacks.guard import DivergenceGuard
from brisk.callbacks.interrupt import SigtermCheckpoint
from brisk.callbacks.rank_seed import RankSeed
from brisk.callbacks.resume import ResumeState
from brisk.callbacks.speed import SpeedMeter

__all__ = ["DivergenceGuard", "LastCheckpoint", "RankSeed", "ResumeState", "SigtermCheckpoint", "SpeedMeter"]
