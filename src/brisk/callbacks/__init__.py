from brisk.callbacks.checkpoint import LastCheckpoint, ModelCheckpoint
from brisk.callbacks.divergence_guard import DivergenceGuard
from brisk.callbacks.lookahead import Lookahead
from brisk.callbacks.model_summary import ModelSummary
from brisk.callbacks.progress_bar import ProgressBar
from brisk.callbacks.pruning import Pruning
from brisk.callbacks.rank_seed import RankSeed
from brisk.callbacks.resume_state import ResumeState
from brisk.callbacks.run_plots import RunPlots
from brisk.callbacks.sigterm_checkpoint import SigtermCheckpoint
from brisk.callbacks.speed_meter import SpeedMeter
from brisk.callbacks.startup_clock import StartupClock
from brisk.callbacks.time_to_accuracy import TimeToAccuracy

__all__ = [
    "DivergenceGuard",
    "LastCheckpoint",
    "Lookahead",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "RankSeed",
    "Pruning",
    "ResumeState",
    "RunPlots",
    "SigtermCheckpoint",
    "SpeedMeter",
    "StartupClock",
    "TimeToAccuracy",
]
