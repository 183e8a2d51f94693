"""brisk's callbacks, and the Lightning callbacks conf/callbacks/ picks by name (registered here; brisk's own register
where they are defined). Each class is imported on first use (brisk.utils.lazy)."""

from lightning.pytorch import callbacks as lightning_callbacks

from brisk.registry import CALLBACKS
from brisk.utils.lazy import exports

CALLBACKS.register("model_checkpoint", lightning_callbacks.ModelCheckpoint)
CALLBACKS.register("lr_monitor", lightning_callbacks.LearningRateMonitor)
CALLBACKS.register("early_stopping", lightning_callbacks.EarlyStopping)
CALLBACKS.register("ema", lightning_callbacks.EMAWeightAveraging)
CALLBACKS.register("swa", lightning_callbacks.StochasticWeightAveraging)
CALLBACKS.register("accumulation_schedule", lightning_callbacks.GradientAccumulationScheduler)

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "DivergenceGuard": ".divergence_guard",
        "LastCheckpoint": ".checkpoint",
        "Lookahead": ".lookahead",
        "ModelSummary": ".model_summary",
        "ProgressBar": ".progress_bar",
        "Pruning": ".pruning",
        "RankSeed": ".rank_seed",
        "ResumeState": ".resume_state",
        "RunPlots": ".run_plots",
        "RunStart": ".run_start",
        "SigtermCheckpoint": ".sigterm_checkpoint",
        "SpeedMeter": ".speed_meter",
        "StartupClock": ".startup_clock",
        "TimeToAccuracy": ".time_to_accuracy",
    },
)
