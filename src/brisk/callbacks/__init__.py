from brisk.callbacks.checkpoint import LastCheckpoint, ModelCheckpoint
from brisk.callbacks.guard import DivergenceGuard
from brisk.callbacks.interrupt import SigtermCheckpoint
from brisk.callbacks.plots import RunPlots
from brisk.callbacks.progress import ProgressBar
from brisk.callbacks.pruning import Pruning
from brisk.callbacks.rank_seed import RankSeed
from brisk.callbacks.resume import ResumeState
from brisk.callbacks.speed import SpeedMeter
from brisk.callbacks.startup import StartupClock

__all__ = [
    "DivergenceGuard",
    "LastCheckpoint",
    "ModelCheckpoint",
    "ProgressBar",
    "RankSeed",
    "Pruning",
    "ResumeState",
    "RunPlots",
    "SigtermCheckpoint",
    "SpeedMeter",
    "StartupClock",
]
