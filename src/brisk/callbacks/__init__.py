"""brisk's callbacks, and the Lightning callbacks conf/callbacks/ picks by name (registered here; brisk's own register
where they are defined)."""

from lightning.pytorch import callbacks as lightning_callbacks

from brisk.callbacks.checkpoint import LastCheckpoint
from brisk.callbacks.divergence_guard import DivergenceGuard
from brisk.callbacks.lookahead import Lookahead
from brisk.callbacks.model_summary import ModelSummary
from brisk.callbacks.progress_bar import ProgressBar
from brisk.callbacks.pruning import Pruning
from brisk.callbacks.rank_seed import RankSeed
from brisk.callbacks.resume_state import ResumeState
from brisk.callbacks.run_plots import RunPlots
from brisk.callbacks.run_start import RunStart
from brisk.callbacks.sigterm_checkpoint import SigtermCheckpoint
from brisk.callbacks.speed_meter import SpeedMeter
from brisk.callbacks.startup_clock import StartupClock
from brisk.callbacks.time_to_accuracy import TimeToAccuracy
from brisk.registry import CALLBACKS

CALLBACKS.register("model_checkpoint", lightning_callbacks.ModelCheckpoint)
CALLBACKS.register("lr_monitor", lightning_callbacks.LearningRateMonitor)
CALLBACKS.register("early_stopping", lightning_callbacks.EarlyStopping)
CALLBACKS.register("ema", lightning_callbacks.EMAWeightAveraging)
CALLBACKS.register("swa", lightning_callbacks.StochasticWeightAveraging)
CALLBACKS.register("accumulation_schedule", lightning_callbacks.GradientAccumulationScheduler)

__all__ = [
    "DivergenceGuard",
    "LastCheckpoint",
    "Lookahead",
    "ModelSummary",
    "ProgressBar",
    "RankSeed",
    "Pruning",
    "ResumeState",
    "RunPlots",
    "RunStart",
    "SigtermCheckpoint",
    "SpeedMeter",
    "StartupClock",
    "TimeToAccuracy",
]
