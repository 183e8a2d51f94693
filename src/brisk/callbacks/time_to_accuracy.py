"""TimeToAccuracy: when a run first reached `target_acc`, in wall time and epochs (summary.json's time_to_accuracy).

What its clock covers is what airbench's published times cover (KellerJordan/cifar10-airbench): the training
steps (SpeedMeter's clock, which leaves validation out), the whitening of the first layer from the data, and the
final test with its test-time augmentation. Left out: moving the data to the device (data.resident, before fit),
building, the sanity check, validation, and with model.compile the excess of the first training step over the
median of the next ten (its compilation). The test pass of a compiled net compiles its eval graph, and that stays in.

Each validation adds (epoch, steps, seconds, val/acc, and the validation's own seconds) to `history`; the first
entry at or over the target is the answer, null if none is. The test adds its accuracy and its seconds on top of
the whole training time. The history and the seconds are in every checkpoint, so a resumed run's clock goes on
from the saved time.
"""

from __future__ import annotations

import statistics
import time

import lightning as L

from brisk.callbacks.speed_meter import SpeedMeter, sync
from brisk.errors import check

COMPILE_REFERENCE_STEPS = 10  # steps after the first whose median is a compiled step's cost


def first_reached(history: list[dict], target: float) -> dict | None:
    """The first entry of `history` whose `acc` is at least `target`, or None."""
    return next((entry for entry in history if entry["acc"] >= target), None)


class TimeToAccuracy(L.Callback):
    def __init__(self, target: float) -> None:
        check("target_acc", target, lambda v: 0 < v <= 1, "a number in (0, 1], a share of the images, e.g. 0.94")
        self.target = target
        self.history: list[dict] = []
        self.test: dict | None = None
        self.compile_excluded = 0.0
        self._before = 0.0  # seconds of the run's earlier processes (a resume)
        self._steps: list[float] = []  # with compile: the first steps' seconds
        self._t0 = self._val_t0 = 0.0
        self._fit: tuple[list[dict], float] | None = None
        self._trainer: L.Trainer | None = None
        self._module: L.LightningModule | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._trainer, self._module = trainer, pl_module

    def seconds(self) -> float:
        speed = next(c for c in self._trainer.callbacks if isinstance(c, SpeedMeter))
        init = getattr(self._module, "data_init_seconds", 0.0)
        return self._before + speed.elapsed() + init - self.compile_excluded

    # With model.compile, the first steps are timed one by one (a sync each) to take the compilation out.
    def _timing(self, trainer) -> bool:
        return bool(self._module.hparams.get("compile")) and len(self._steps) <= COMPILE_REFERENCE_STEPS

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self._timing(trainer):
            sync(trainer.strategy.root_device)
            self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._timing(trainer):
            sync(trainer.strategy.root_device)
            self._steps.append(time.perf_counter() - self._t0)
            if len(self._steps) == COMPILE_REFERENCE_STEPS + 1:
                self.compile_excluded += max(0.0, self._steps[0] - statistics.median(self._steps[1:]))

    def on_validation_start(self, trainer, pl_module) -> None:
        sync(trainer.strategy.root_device)
        self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        acc = trainer.callback_metrics.get("val/acc")
        if trainer.sanity_checking or trainer.state.fn != "fit" or acc is None:
            return
        sync(trainer.strategy.root_device)
        entry = {"epoch": trainer.current_epoch + 1, "steps": trainer.global_step, "acc": float(acc)}
        # what the clock leaves out: the evaluation that reads it, its cost per epoch
        entry["val_seconds"] = round(time.perf_counter() - self._val_t0, 4)
        self.history.append({**entry, "seconds": round(self.seconds(), 4)})

    # brisk-train tests a checkpoint, and Lightning loads this callback's state from it: keep fit's own.
    def on_fit_end(self, trainer, pl_module) -> None:
        self._fit = (list(self.history), self.seconds())

    def on_test_start(self, trainer, pl_module) -> None:
        sync(trainer.strategy.root_device)
        self._t0 = time.perf_counter()

    def on_test_end(self, trainer, pl_module) -> None:
        sync(trainer.strategy.root_device)
        test_seconds = time.perf_counter() - self._t0
        acc = trainer.callback_metrics.get("test/acc")
        if self._fit is None or acc is None:
            return
        self.history, fit_seconds = self._fit
        self.test = {
            "acc": float(acc),
            "reached": float(acc) >= self.target,
            "seconds": round(fit_seconds + test_seconds, 4),
            "test_seconds": round(test_seconds, 4),
            "epochs": trainer.current_epoch,
            "tta": pl_module.hparams.get("tta", "none"),
        }

    def report(self) -> dict:
        """summary.json's time_to_accuracy."""
        return {
            "target": self.target,
            "val": first_reached(self.history, self.target),
            "test": self.test,
            "history": self.history,
            "compile_excluded_seconds": round(self.compile_excluded, 4),
            "clock": "training steps + whitening from the data + the final test with its TTA; not the data's move to "
            "the device, building, sanity check, validation, or the first compiled step's excess",
        }

    def state_dict(self) -> dict:
        seconds = self.seconds() if self._trainer is not None else self._before
        return {"history": self.history, "seconds": seconds, "excluded": self.compile_excluded}

    def load_state_dict(self, state_dict: dict) -> None:
        self.history = list(state_dict["history"])
        self._before, self.compile_excluded = float(state_dict["seconds"]), float(state_dict["excluded"])
        self._steps = [0.0] * (COMPILE_REFERENCE_STEPS + 1)  # a resumed run's compilation is not taken out again
