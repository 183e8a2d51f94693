from brisk.callbacks.checkpoint import LastCheckpoint
from brisk.callbacks.guard import DivergenceGuard
from brisk.callbacks.interrupt import SigtermCheckpoint
from brisk.callbacks.resume import ResumeState
from brisk.callbacks.speed import SpeedMeter
from brisk.callbacks.startup import StartupClock

__all__ = ["DivergenceGuard", "LastCheckpoint", "ResumeState", "SigtermCheckpoint", "SpeedMeter", "StartupClock"]
